"""What the packager needs to know about an exported model, read from its ONNX `metadata_props`.

`attndeploy export` records (docs/ops.md, "Model-level interface"): `attndeploy.variant`,
`attndeploy.version`, `attndeploy.config` (the JSON model config), `attndeploy.weights_sha256` and
`attndeploy.labels` (JSON list of label names). A file with `attndeploy.version` but none of the
others is a user's model exported with `export --factory` / `export_model` (`is_generic`; packaged
by its declared inputs and outputs, see `generic.py`); a file with neither was not made by
attndeploy.
The config must name `variant`, `head`, `num_labels`, `max_seq` and `vocab_size` (the python
flavour checks token ids against it). The optional `attndeploy.max_seq` (an export with a lower
`--max-seq`) takes precedence over the config's `max_seq`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, fields
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from attndeploy.errors import ExportError, RepositoryError
from attndeploy.interface import ModelInterface, model_interface
from attndeploy.runtime.metadata import ModelMetadata, parse_metadata
from attndeploy.runtime.names import (
    DOMAIN,
    META_CONFIG,
    META_LABELS,
    META_VARIANT,
    META_VERSION,
    META_WEIGHTS,
)
from attndeploy.serving.packaging.onnx_tensors import check_tensors


@dataclass(frozen=True)
class ModelInfo(ModelMetadata):
    """The facts of one exported model that serving depends on: its `ModelMetadata`, parsed
    once by `runtime.metadata.parse_metadata` (without the tokenizer: a text model checks its
    record itself), plus the interface Triton's config declares (`attndeploy.interface`, which
    imports onnx, so the torch- and onnx-free runtime does not have it)."""

    @property
    def interface(self) -> ModelInterface:
        return model_interface(head=self.head, num_labels=self.num_labels, gated=self.gated,
                               tag_head="crf" if self.decodes_tags else "softmax")


def load_onnx_graph(path: Path) -> onnx.ModelProto:
    """Parse `path` without external tensor data (enough for metadata and the graph signature),
    and vet the size of every stored tensor (`onnx_tensors.check_tensors`): RepositoryError for
    one that onnxruntime would refuse to load, so every reader refuses what a server would."""
    try:
        model = onnx.load(str(path), load_external_data=False)
        check_tensors(model, Path(path))
    except OSError as exc:
        raise RepositoryError(f"Could not read ONNX model {path}: {exc}") from exc
    except DecodeError as exc:
        raise RepositoryError(f"{path} is not an ONNX model: {exc}") from exc
    return model


def uses_external_data(model: onnx.ModelProto) -> bool:
    """Whether any initializer keeps its bytes in a separate file (not copied by the packager)."""
    return any(
        init.data_location == onnx.TensorProto.EXTERNAL for init in model.graph.initializer
    )


CHECKPOINT_METADATA = (META_VARIANT, META_CONFIG, META_WEIGHTS, META_LABELS)


def is_generic(model: onnx.ModelProto) -> bool:
    """Whether `model` is a generic one: written by attndeploy's exporter (`attndeploy.version`)
    from a user's model, so without any of a checkpoint's metadata. A file with some of those
    keys is a (possibly broken) checkpoint export; `read_model_info` names what it lacks."""
    keys = {prop.key for prop in model.metadata_props}
    return META_VERSION in keys and not keys & set(CHECKPOINT_METADATA)


def read_model_info(model: onnx.ModelProto, source: str = "the model") -> ModelInfo:
    """The `ModelInfo` recorded in `model`'s metadata (read by `runtime.metadata.parse_metadata`,
    the one reader); RepositoryError naming what is missing or wrong."""
    meta = {prop.key: prop.value for prop in model.metadata_props}
    try:
        parsed = parse_metadata(meta, source, read_tokenizer=False,
                                outputs=[output.name for output in model.graph.output])
    except ExportError as exc:
        raise RepositoryError(str(exc)) from exc
    if any("\n" in label or "\r" in label for label in parsed.labels):  # labels.txt lines
        raise RepositoryError(f"{source}: label names must not contain line breaks.")
    return ModelInfo(**{field.name: getattr(parsed, field.name) for field in fields(parsed)})


def missing_functions(model: onnx.ModelProto) -> list[str]:
    """`domain::op` of every custom-domain node (graph or function bodies) with no local function.

    onnx.checker accepts such a model, but onnxruntime refuses it (`... is not a registered
    function/op`), so the repository linter reports each one.
    """
    defined = {(f.domain, f.name) for f in model.functions}
    nodes = list(_walk(model.graph.node))
    for function in model.functions:
        nodes.extend(_walk(function.node))
    missing = {
        f"{node.domain}::{node.op_type}"
        for node in nodes
        if node.domain == DOMAIN and (node.domain, node.op_type) not in defined
    }
    return sorted(missing)


def _walk(nodes: Iterable[onnx.NodeProto]) -> Iterator[onnx.NodeProto]:
    """`nodes` and, recursively, the nodes of their subgraphs (If/Loop/Scan bodies)."""
    for node in nodes:
        yield node
        for attr in node.attribute:
            for graph in (*([attr.g] if attr.HasField("g") else []), *attr.graphs):
                yield from _walk(graph.node)
