"""The model-level interface (docs/ops.md, "Model-level interface"), declared once.

Every exported attndeploy model takes `input_ids` and `attention_mask` (int64 `[batch, seq]`) and
returns its family's outputs (`FamilySpec.outputs`, e.g. `logits` float32 `[batch, num_labels]`
for text classification, `[batch, seq, num_labels]` for token classification) plus, for a gated
variant (GA-Net's and any plug-in's), `gates` (bool `[batch, seq]`). `model_interface` builds
that declaration for one model; the onnxruntime feed (`make_feed`), Triton's `input`/`output` blocks
(`model_config.py`), the generated python-backend `model.py` and the repository linter
(`check_repo.py`) all derive from it, so a name or a dtype is written in exactly one place.

`Runner` is the interface of whatever executes such a model (Polygraphy's design): PyTorch eager,
onnxruntime and the ONNX reference evaluator (`attndeploy.validate.runners`) and a Triton server
(`attndeploy.serving.client.triton.TritonRunner`), so parity checks and load tests swap backends
freely. This module imports neither torch nor anything above it: every stage imports it.

Dims are tuples of `int | str`: the strings `"batch"` and `"seq"` are symbolic (a dim_param in
ONNX, `-1` in Triton, where the batch dim is implicit through `max_batch_size`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import onnx

from attndeploy.errors import ConfigError
from attndeploy.families.registry import family_for_head
from attndeploy.runtime.names import (  # noqa: F401
    ATTENTION_MASK,
    GATES,
    INPUT_IDS,
    LOGITS,
    TAG_IDS,
)

BATCH = "batch"
SEQ = "seq"

# The heads of the two built-in families (`attndeploy.families`), kept importable for the code
# and tests that name them; nothing here branches on them: a family's spec declares its outputs.
TAGGING = "tagging"
CLASSIFICATION = "classification"

# dtype name -> (numpy dtype, ONNX TensorProto element type, Triton model_config DataType name)
_DTYPES: dict[str, tuple[type, int, str]] = {
    "int64": (np.int64, onnx.TensorProto.INT64, "TYPE_INT64"),
    "float32": (np.float32, onnx.TensorProto.FLOAT, "TYPE_FP32"),
    "bool": (np.bool_, onnx.TensorProto.BOOL, "TYPE_BOOL"),
}


@dataclass(frozen=True)
class TensorSpec:
    """One input or output: its name, dtype name (`int64`, `float32`, `bool`) and dims."""

    name: str
    dtype: str
    dims: tuple[int | str, ...]
    doc: str = ""

    @property
    def numpy_dtype(self) -> np.dtype:
        return np.dtype(_DTYPES[self.dtype][0])

    @property
    def onnx_elem_type(self) -> int:
        return _DTYPES[self.dtype][1]

    @property
    def triton_type(self) -> str:
        """The `model_config_pb2.DataType` name, e.g. `TYPE_INT64`."""
        return _DTYPES[self.dtype][2]

    @property
    def triton_dims(self) -> list[int]:
        """Dims as Triton's config states them: batch dropped (implicit), symbolic dims -1."""
        if not self.dims or self.dims[0] != BATCH:
            raise ValueError(f"{self.name}: the first dim must be the batch dim, got {self.dims}")
        return [-1 if isinstance(d, str) else int(d) for d in self.dims[1:]]


@dataclass(frozen=True)
class ModelInterface:
    """The inputs and outputs of one model (see `model_interface`)."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    @property
    def input_names(self) -> list[str]:
        return [spec.name for spec in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [spec.name for spec in self.outputs]

    def spec(self, name: str) -> TensorSpec:
        for spec in (*self.inputs, *self.outputs):
            if spec.name == name:
                return spec
        raise KeyError(name)


def text_inputs() -> tuple[TensorSpec, ...]:
    """The inputs of a text model, every family's unless its spec says otherwise."""
    return (
        TensorSpec(INPUT_IDS, "int64", (BATCH, SEQ), "token ids"),
        TensorSpec(ATTENTION_MASK, "int64", (BATCH, SEQ), "1 = real token, 0 = padding"),
    )


# A CRF tagger's extra output (token-classification's, with `tag_head="crf"`), after its logits
# (the emissions): the best tag ids Viterbi finds inside the graph, so every runtime decodes alike.
TAGS_OUTPUT = TAG_IDS


def model_interface(*, head: str, num_labels: int, gated: bool,
                    **options: Any) -> ModelInterface:
    """The interface of a model of the family whose head is `head` (`classification`,
    `tagging`, or a plug-in family's), with `num_labels` labels, and `gates` when its variant is
    gated. The inputs are the family's (`FamilySpec.inputs`, a text model's by default), the
    outputs the family's (`FamilySpec.outputs(num_labels, **options)`: `options` are the model's
    own choices a family reads, e.g. a tagger's `tag_head="crf"` adds `tag_ids`), then the
    gates. ValueError for a head no family has."""
    try:
        family = family_for_head(head)
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    inputs = family.inputs() if family.inputs is not None else text_inputs()
    outputs = list(family.outputs(num_labels, **options))
    if gated:
        outputs.append(TensorSpec(GATES, "bool", (BATCH, SEQ), "tokens the model attended to"))
    return ModelInterface(inputs=inputs, outputs=tuple(outputs))


def make_feed(input_ids: np.ndarray, attention_mask: np.ndarray) -> dict[str, np.ndarray]:
    """The onnxruntime feed `{name: array}` with the declared dtypes (int64 for both inputs)."""
    return {
        INPUT_IDS: np.ascontiguousarray(input_ids, dtype=np.int64),
        ATTENTION_MASK: np.ascontiguousarray(attention_mask, dtype=np.int64),
    }


DEFAULT_DOMAINS = ("", "ai.onnx")  # the two names of the standard ONNX op set


def default_opset(model: onnx.ModelProto) -> int | None:
    """The model's standard ONNX opset (its default-domain import), None without one: what a
    runtime must implement to run it, and which signature an op such as ReduceMin takes."""
    return next((int(entry.version) for entry in model.opset_import
                 if entry.domain in DEFAULT_DOMAINS), None)


Feed = Mapping[str, np.ndarray]
Outputs = dict[str, np.ndarray]


@runtime_checkable
class Runner(Protocol):
    """A backend that runs a model: a context manager (entering loads or connects, leaving
    releases) with a `name` and `infer(feed) -> outputs`, both keyed by tensor name."""

    name: str

    def __enter__(self) -> Runner: ...

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None: ...

    def infer(self, feed: Feed) -> Outputs: ...
