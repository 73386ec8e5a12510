"""Compare an ONNX graph's and a Triton config's inputs/outputs with the model-level interface.

Both functions return a list of human-readable mismatches (empty when they agree); the packager
raises on the first list, the repository linter reports every entry.
"""

from __future__ import annotations

import onnx
from tritonclient.grpc import model_config_pb2 as mc

from attndeploy.echo import echo
from attndeploy.interface import ModelInterface, TensorSpec


def _onnx_dims(value: onnx.ValueInfoProto) -> list[int | str | None] | None:
    """Dims of a graph value: int, symbol (str) or None (unnamed); None if it has no shape."""
    tensor = value.type.tensor_type
    if not tensor.HasField("shape"):
        return None
    dims: list[int | str | None] = []
    for dim in tensor.shape.dim:
        if dim.HasField("dim_value"):
            dims.append(int(dim.dim_value))
        elif dim.HasField("dim_param"):
            dims.append(dim.dim_param)
        else:
            dims.append(None)
    return dims


def _compare_onnx_value(
    kind: str, value: onnx.ValueInfoProto, spec: TensorSpec
) -> list[str]:
    problems: list[str] = []
    elem = value.type.tensor_type.elem_type
    if elem != spec.onnx_elem_type:
        got = onnx.TensorProto.DataType.Name(elem)
        want = onnx.TensorProto.DataType.Name(spec.onnx_elem_type)
        problems.append(f"ONNX {kind} {spec.name!r} has type {got}, expected {want}")
    dims = _onnx_dims(value)
    if dims is None:
        problems.append(f"ONNX {kind} {spec.name!r} has no shape, expected {list(spec.dims)}")
        return problems
    if len(dims) != len(spec.dims):
        problems.append(
            f"ONNX {kind} {spec.name!r} has rank {len(dims)} {echo(str(dims))}, expected "
            f"{len(spec.dims)} {list(spec.dims)}"
        )
        return problems
    for axis, (got_dim, want_dim) in enumerate(zip(dims, spec.dims, strict=True)):
        if isinstance(want_dim, str) and isinstance(got_dim, int):
            problems.append(
                f"ONNX {kind} {spec.name!r} dim {axis} ({want_dim}) is fixed to {got_dim}; "
                "it must stay symbolic (re-export with dynamic shapes)"
            )
        elif isinstance(want_dim, int) and got_dim != want_dim:
            problems.append(
                f"ONNX {kind} {spec.name!r} dim {axis} is {echo(str(got_dim))}, expected "
                f"{want_dim}"
            )
    return problems


def onnx_mismatches(model: onnx.ModelProto, interface: ModelInterface) -> list[str]:
    """How `model`'s graph inputs/outputs differ from `interface` (names, dtypes, dims)."""
    initializers = {init.name for init in model.graph.initializer}
    graph_inputs = {v.name: v for v in model.graph.input if v.name not in initializers}
    graph_outputs = {v.name: v for v in model.graph.output}
    problems: list[str] = []
    for kind, values, specs in (
        ("input", graph_inputs, interface.inputs),
        ("output", graph_outputs, interface.outputs),
    ):
        wanted = {spec.name for spec in specs}
        for spec in specs:
            if spec.name not in values:
                problems.append(
                    f"ONNX graph has no {kind} {spec.name!r} (its {kind}s: "
                    f"{echo(str(sorted(values)))})"
                )
            else:
                problems.extend(_compare_onnx_value(kind, values[spec.name], spec))
        problems.extend(
            f"ONNX graph has an unexpected {kind} {echo(repr(name))}"
            for name in sorted(set(values) - wanted)
        )
    return problems


def _compare_config_entry(
    kind: str, entry: mc.ModelInput | mc.ModelOutput, spec: TensorSpec
) -> list[str]:
    problems: list[str] = []
    want_type = mc.DataType.Value(spec.triton_type)
    if entry.data_type != want_type:
        got = mc.DataType.Name(entry.data_type)
        problems.append(f"config {kind} {spec.name!r} has data_type {got}, expected "
                        f"{spec.triton_type}")
    if list(entry.dims) != spec.triton_dims:
        problems.append(
            f"config {kind} {spec.name!r} has dims {echo(str(list(entry.dims)))}, expected "
            f"{spec.triton_dims} (batch implicit, seq -1)"
        )
    if entry.HasField("reshape"):
        problems.append(f"config {kind} {spec.name!r} has a reshape; attndeploy models need none")
    return problems


def config_mismatches(cfg: mc.ModelConfig, interface: ModelInterface) -> list[str]:
    """How `cfg`'s `input`/`output` blocks differ from `interface` (names, data types, dims)."""
    problems: list[str] = []
    if cfg.max_batch_size < 1:
        problems.append(
            f"max_batch_size is {cfg.max_batch_size}; attndeploy models keep the batch dim "
            "implicit, so it must be >= 1"
        )
    for kind, entries, specs in (
        ("input", {e.name: e for e in cfg.input}, interface.inputs),
        ("output", {e.name: e for e in cfg.output}, interface.outputs),
    ):
        wanted = {spec.name for spec in specs}
        for spec in specs:
            if spec.name not in entries:
                problems.append(f"config has no {kind} {spec.name!r} (its {kind}s: "
                                f"{echo(str(sorted(entries)))})")
            else:
                problems.extend(_compare_config_entry(kind, entries[spec.name], spec))
        problems.extend(
            f"config has an unexpected {kind} {echo(repr(name))}"
            for name in sorted(set(entries) - wanted)
        )
    return problems
