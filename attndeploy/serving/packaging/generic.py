"""A generic model: any ONNX file from `attndeploy export --factory` / `export_model`, served by
its own declared inputs and outputs (no text-classifier interface, no checkpoint metadata).

The graph's inputs and outputs drive `config.pbtxt`: names as declared, ONNX element types as
Triton `TYPE_*`, dims with -1 for each symbolic dim. When every input and output starts with the
same symbolic dim, that dim is the batch: it is left out of the config's dims and
`max_batch_size` is `PackageOptions.max_batch_size` (dynamic batching as the options say).
Otherwise `max_batch_size` is 0 (no batching) and the dims are the full ones. The python
flavour's `model.py` (`templates/generic_model.py.tmpl`) reads the tensors by name, refuses a
request whose dtype or rank differs (INVALID_ARG), and runs onnxruntime; no warm-up is written
(valid warm-up values are the model's business).
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx
from tritonclient.grpc import model_config_pb2 as mc

from attndeploy.echo import echo
from attndeploy.errors import RepositoryError

# ONNX element type -> Triton DataType name (the types numpy and both backends carry)
TRITON_TYPES = {
    onnx.TensorProto.FLOAT: "TYPE_FP32",
    onnx.TensorProto.FLOAT16: "TYPE_FP16",
    onnx.TensorProto.DOUBLE: "TYPE_FP64",
    onnx.TensorProto.INT8: "TYPE_INT8",
    onnx.TensorProto.INT16: "TYPE_INT16",
    onnx.TensorProto.INT32: "TYPE_INT32",
    onnx.TensorProto.INT64: "TYPE_INT64",
    onnx.TensorProto.UINT8: "TYPE_UINT8",
    onnx.TensorProto.UINT16: "TYPE_UINT16",
    onnx.TensorProto.UINT32: "TYPE_UINT32",
    onnx.TensorProto.UINT64: "TYPE_UINT64",
    onnx.TensorProto.BOOL: "TYPE_BOOL",
}


@dataclass(frozen=True)
class GraphTensor:
    """One declared graph input or output: name, ONNX element type, dims (int or symbol)."""

    name: str
    elem_type: int
    dims: tuple[int | str, ...]

    @property
    def triton_type(self) -> str:
        return TRITON_TYPES[self.elem_type]

    def triton_dims(self, batched: bool) -> list[int]:
        """Dims as the config states them: batch dropped when batched, symbolic dims -1."""
        return [-1 if isinstance(d, str) else d for d in self.dims[1 if batched else 0:]]


@dataclass(frozen=True)
class GenericInfo:
    """The facts of a generic model that packaging and the linter depend on."""

    inputs: tuple[GraphTensor, ...]
    outputs: tuple[GraphTensor, ...]
    batch_dim: str | None  # the symbolic first dim shared by every tensor, or None
    exporter_version: str

    @property
    def batched(self) -> bool:
        return self.batch_dim is not None

    variant = "custom"  # what PackagedModel and the CLI print where a classifier has a variant
    head = "generic"
    gated = False
    num_labels = 0
    max_seq = 0


def _tensor(value: onnx.ValueInfoProto, kind: str, source: str) -> GraphTensor:
    tensor = value.type.tensor_type
    what = f"{source}: {kind} {echo(repr(value.name))}"
    if not value.type.HasField("tensor_type"):
        raise RepositoryError(f"{what} is not a tensor; Triton serves tensors only")
    if tensor.elem_type not in TRITON_TYPES:
        name = onnx.TensorProto.DataType.Name(tensor.elem_type)
        raise RepositoryError(f"{what} has type {name}, which the served model cannot carry; "
                              "use a numeric or bool type")
    if not tensor.HasField("shape") or not tensor.shape.dim:
        raise RepositoryError(f"{what} has no declared dims (a scalar or an unknown rank); "
                              "Triton needs at least one dim")
    dims: list[int | str] = []
    for axis, dim in enumerate(tensor.shape.dim):
        if dim.HasField("dim_value"):
            dims.append(int(dim.dim_value))
        elif dim.HasField("dim_param"):
            dims.append(dim.dim_param)
        else:
            dims.append(f"{value.name}_{axis}")  # unnamed symbolic dim: still -1
    return GraphTensor(value.name, tensor.elem_type, tuple(dims))


def read_generic_info(model: onnx.ModelProto, version: str, source: str) -> GenericInfo:
    """The declared inputs (initializers excepted) and outputs of `model`'s graph."""
    initializers = {init.name for init in model.graph.initializer}
    inputs = tuple(_tensor(v, "input", source) for v in model.graph.input
                   if v.name not in initializers)
    outputs = tuple(_tensor(v, "output", source) for v in model.graph.output)
    if not inputs or not outputs:
        missing = "inputs" if not inputs else "outputs"
        raise RepositoryError(f"{source}: the graph declares no {missing}")
    firsts = {t.dims[0] for t in (*inputs, *outputs)}
    (first,) = firsts if len(firsts) == 1 else (None,)
    return GenericInfo(inputs, outputs, first if isinstance(first, str) else None, version)


def generic_io(cfg: mc.ModelConfig, info: GenericInfo) -> None:
    """The config's `input` and `output` blocks, from the graph."""
    for tensors, block in ((info.inputs, cfg.input), (info.outputs, cfg.output)):
        for tensor in tensors:
            entry = block.add()
            entry.name = tensor.name
            entry.data_type = mc.DataType.Value(tensor.triton_type)
            entry.dims.extend(tensor.triton_dims(info.batched))


def generic_config_mismatches(cfg: mc.ModelConfig, info: GenericInfo) -> list[str]:
    """How `cfg`'s batching and I/O blocks differ from what the graph declares."""
    problems: list[str] = []
    if info.batched and cfg.max_batch_size < 1:
        problems.append(f"max_batch_size is {cfg.max_batch_size}; the graph's first dim "
                        f"{echo(repr(info.batch_dim))} is a batch dim, so it must be >= 1")
    if not info.batched and cfg.max_batch_size != 0:
        problems.append(f"max_batch_size is {cfg.max_batch_size}; the graph has no shared "
                        "batch dim, so it must be 0")
    for kind, entries, tensors in (("input", {e.name: e for e in cfg.input}, info.inputs),
                                   ("output", {e.name: e for e in cfg.output}, info.outputs)):
        for tensor in tensors:
            entry = entries.get(tensor.name)
            if entry is None:
                problems.append(f"config has no {kind} {echo(repr(tensor.name))} (its "
                                f"{kind}s: {echo(str(sorted(entries)))})")
                continue
            if entry.data_type != mc.DataType.Value(tensor.triton_type):
                problems.append(f"config {kind} {echo(repr(tensor.name))} has data_type "
                                f"{mc.DataType.Name(entry.data_type)}, expected "
                                f"{tensor.triton_type}")
            want = tensor.triton_dims(info.batched)
            if list(entry.dims) != want:
                problems.append(f"config {kind} {echo(repr(tensor.name))} has dims "
                                f"{echo(str(list(entry.dims)))}, expected {echo(str(want))}")
        names = {t.name for t in tensors}
        problems.extend(f"config has an unexpected {kind} {echo(repr(name))}"
                        for name in sorted(set(entries) - names))
    return problems
