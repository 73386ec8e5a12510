"""What the packager needs to know about an exported model, read from its ONNX `metadata_props`.

`attndeploy export` records (docs/ops.md, "Model-level interface"): `attndeploy.variant`,
`attndeploy.version`, `attndeploy.config` (the JSON model config), `attndeploy.weights_sha256` and
`attndeploy.labels` (JSON list of label names). A file with `attndeploy.version` but none of the
others is a user's model exported with `export --model` / `export_model` (`is_generic`; packaged
by its declared inputs and outputs, see `generic.py`); a file with neither was not made by
attndeploy.
The config must name `variant`, `head`, `num_labels`, `max_seq` and `vocab_size` (the python
flavour checks token ids against it). The optional `attndeploy.max_seq` (an export with a lower
`--max-seq`) takes precedence over the config's `max_seq`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx
from google.protobuf.message import DecodeError

from attndeploy.errors import RepositoryError
from attndeploy.interface import ModelInterface, model_interface
from attndeploy.runtime.metadata import GATED_VARIANTS

META_VARIANT = "attndeploy.variant"
META_VERSION = "attndeploy.version"
META_CONFIG = "attndeploy.config"
META_WEIGHTS = "attndeploy.weights_sha256"
META_LABELS = "attndeploy.labels"
META_MAX_SEQ = "attndeploy.max_seq"  # optional: the export's own limit, <= the config's max_seq
REQUIRED_METADATA = (META_VARIANT, META_VERSION, META_CONFIG, META_WEIGHTS, META_LABELS)
REQUIRED_CONFIG_KEYS = ("variant", "head", "num_labels", "max_seq", "vocab_size")
CUSTOM_DOMAIN = "attndeploy"


@dataclass(frozen=True)
class ModelInfo:
    """The facts of one exported model that serving depends on."""

    variant: str
    head: str
    num_labels: int
    max_seq: int
    vocab_size: int
    labels: tuple[str, ...]
    exporter_version: str
    weights_sha256: str
    config: dict[str, Any]

    @property
    def gated(self) -> bool:
        """Whether the model outputs `gates` (GA-Net; the list in-process inference reads)."""
        return self.variant in GATED_VARIANTS

    @property
    def interface(self) -> ModelInterface:
        return model_interface(head=self.head, num_labels=self.num_labels, gated=self.gated)


def load_onnx_graph(path: Path) -> onnx.ModelProto:
    """Parse `path` without external tensor data (enough for metadata and the graph signature)."""
    try:
        return onnx.load(str(path), load_external_data=False)
    except OSError as exc:
        raise RepositoryError(f"Could not read ONNX model {path}: {exc}") from exc
    except DecodeError as exc:
        raise RepositoryError(f"{path} is not an ONNX model: {exc}") from exc


def uses_external_data(model: onnx.ModelProto) -> bool:
    """Whether any initializer keeps its bytes in a separate file (not copied by the packager)."""
    return any(
        init.data_location == onnx.TensorProto.EXTERNAL for init in model.graph.initializer
    )


def _positive_int(config: dict[str, Any], key: str, source: str) -> int:
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RepositoryError(f"{source}: model config {key!r} must be a positive integer, "
                              f"got {value!r}; re-export the model.")
    return value


def _graph_max_seq(meta: dict[str, str], config_max_seq: int, source: str) -> int:
    """The longest seq the graph was exported for: `attndeploy.max_seq` (export --max-seq may
    lower it), else the model config's `max_seq`."""
    raw = meta.get(META_MAX_SEQ)
    if raw is None:
        return config_max_seq
    if not raw.isdigit() or not 1 <= int(raw) <= config_max_seq:
        raise RepositoryError(
            f"{source}: {META_MAX_SEQ} = {raw!r} must be an integer in [1, {config_max_seq}] "
            "(the model config's max_seq); re-export the model."
        )
    return int(raw)


CHECKPOINT_METADATA = (META_VARIANT, META_CONFIG, META_WEIGHTS, META_LABELS)


def is_generic(model: onnx.ModelProto) -> bool:
    """Whether `model` is a generic one: written by attndeploy's exporter (`attndeploy.version`)
    from a user's model, so without any of a checkpoint's metadata. A file with some of those
    keys is a (possibly broken) checkpoint export; `read_model_info` names what it lacks."""
    keys = {prop.key for prop in model.metadata_props}
    return META_VERSION in keys and not keys & set(CHECKPOINT_METADATA)


def read_model_info(model: onnx.ModelProto, source: str = "the model") -> ModelInfo:
    """The `ModelInfo` recorded in `model`'s metadata; RepositoryError naming what is missing."""
    meta = {prop.key: prop.value for prop in model.metadata_props}
    missing = [key for key in REQUIRED_METADATA if key not in meta]
    if missing:
        raise RepositoryError(
            f"{source} was not made by `attndeploy export`: its metadata lacks "
            f"{', '.join(missing)}. Export the checkpoint with attndeploy first."
        )
    try:
        config = json.loads(meta[META_CONFIG])
        labels = json.loads(meta[META_LABELS])
    except json.JSONDecodeError as exc:
        raise RepositoryError(f"{source}: corrupt attndeploy metadata ({exc}).") from exc
    if not isinstance(config, dict):
        raise RepositoryError(f"{source}: {META_CONFIG} must be a JSON object.")
    missing = [key for key in REQUIRED_CONFIG_KEYS if key not in config]
    if missing:
        raise RepositoryError(
            f"{source}: the model config in {META_CONFIG} lacks {', '.join(missing)}; "
            "re-export the model with this attndeploy version."
        )
    num_labels = _positive_int(config, "num_labels", source)
    if not (isinstance(labels, list) and all(isinstance(x, str) for x in labels)):
        raise RepositoryError(f"{source}: {META_LABELS} must be a JSON list of strings.")
    if len(labels) != num_labels:
        raise RepositoryError(
            f"{source}: {len(labels)} label names in {META_LABELS} but num_labels = {num_labels}."
        )
    if any("\n" in label or "\r" in label for label in labels):
        raise RepositoryError(f"{source}: label names must not contain line breaks.")
    if config["head"] not in ("classification", "tagging"):
        raise RepositoryError(f"{source}: unknown head {config['head']!r} in the model config.")
    if config["variant"] != meta[META_VARIANT]:
        raise RepositoryError(
            f"{source}: {META_VARIANT} = {meta[META_VARIANT]!r} but the model config says "
            f"{config['variant']!r}."
        )
    return ModelInfo(
        variant=str(config["variant"]),
        head=str(config["head"]),
        num_labels=num_labels,
        max_seq=_graph_max_seq(meta, _positive_int(config, "max_seq", source), source),
        vocab_size=_positive_int(config, "vocab_size", source),
        labels=tuple(labels),
        exporter_version=meta[META_VERSION],
        weights_sha256=meta[META_WEIGHTS],
        config=config,
    )


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
        if node.domain == CUSTOM_DOMAIN and (node.domain, node.op_type) not in defined
    }
    return sorted(missing)


def _walk(nodes: Iterable[onnx.NodeProto]) -> Iterator[onnx.NodeProto]:
    """`nodes` and, recursively, the nodes of their subgraphs (If/Loop/Scan bodies)."""
    for node in nodes:
        yield node
        for attr in node.attribute:
            for graph in (*([attr.g] if attr.HasField("g") else []), *attr.graphs):
                yield from _walk(graph.node)
