"""`export_model`: any PyTorch model that uses `attndeploy.nn` layers -> a checked ONNX file.

    export_model(model, "model.onnx",
                 inputs={"input_ids": ids, "attention_mask": mask},           # model(**inputs)
                 dynamic_shapes={"input_ids": {0: "batch", 1: "seq"},
                                 "attention_mask": {0: "batch", 1: "seq"}})

The model may return a tensor (output `output`), a tuple or list (`output_0`, `output_1`, ...),
a dict, or a Hugging Face `ModelOutput` (anything with `keys()` and `to_tuple()`; named by its
keys). `output_names` names the outputs of a tensor or tuple, or picks (and orders) the keys of a
dict. The contract checks of `export_checkpoint` apply: every call of an attention layer is one
`attndeploy` node with its function, declared dynamic dims stay symbolic, no random op, one run
in onnxruntime, and the file is written atomically (nothing is written unless every check
passes). The model is traced in eval mode; its modules' train/eval flags are restored afterwards.

Stages (timed in `ExportResult.stages`): registry, capture (an eager run that learns the outputs,
then `torch.export.export`, non-strict), translate, finish (functions, checks, metadata,
onnx.checker), runtime_check.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import onnx
import torch
from torch import nn

from attndeploy import __version__
from attndeploy.errors import ExportError
from attndeploy.export import lstm, tracing
from attndeploy.export.dims import DimSpec, dim_spec, export_program
from attndeploy.fsutil import atomic_write_bytes
from attndeploy.models.inputs import position_limit
from attndeploy.opspec.bodies import DOMAIN_VERSION
from attndeploy.runtime.names import (
    META_DIM_BOUNDS,
    META_DOMAIN_VERSION,
    META_DYNAMIC_AXES,
    META_INLINED,
    META_MAX_SEQ,
    META_OPSET,
    META_VARIANT,
    META_VERSION,
    PRODUCER,
)
from attndeploy.variants.op_registry import DEFAULT_OPSET, SUPPORTED_OPSETS, function_protos


@dataclass(frozen=True)
class ExportOptions:
    opset: int = DEFAULT_OPSET
    fp16: bool = False
    inline_functions: bool = False
    max_seq: int | None = None  # checkpoints: largest seq the graph accepts (default max_seq)

    def __post_init__(self) -> None:
        if self.opset not in SUPPORTED_OPSETS:
            raise ExportError(
                f"opset {self.opset} is not supported; choose one of "
                f"{SUPPORTED_OPSETS.start}..{SUPPORTED_OPSETS.stop - 1}"
            )
        if self.max_seq is not None and self.max_seq < 2:
            raise ExportError(f"--max-seq must be >= 2, got {self.max_seq}")


@dataclass
class ExportResult:
    path: Path
    seconds: float
    custom_nodes: dict[str, int]
    metadata: dict[str, str]
    options: ExportOptions
    stages: dict[str, float] = field(default_factory=dict)
    cpu_seconds: float = 0.0  # this process's CPU time (less sensitive to a busy machine)
    input_names: tuple[str, ...] = ()
    output_names: tuple[str, ...] = ()
    dim_bounds: dict[str, tuple[int, int | None]] = field(default_factory=dict)  # narrowed dims

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "seconds": round(self.seconds, 3),
            "cpu_seconds": round(self.cpu_seconds, 3),
            "stages": {k: round(v, 3) for k, v in self.stages.items()},
            "custom_nodes": self.custom_nodes,
            "opset": self.options.opset,
            "fp16": self.options.fp16,
            "inline_functions": self.options.inline_functions,
            "max_seq": int(self.metadata.get(META_MAX_SEQ, 0)) or None,
            "variant": self.metadata.get(META_VARIANT),
            "inputs": list(self.input_names),
            "outputs": list(self.output_names),
            "dim_bounds": {name: list(bounds) for name, bounds in self.dim_bounds.items()},
        }


# ----------------------------------------------------------------------------- outputs


def _is_model_output(value: Any) -> bool:
    """A Hugging Face `ModelOutput`-like object (no dependency on transformers)."""
    return callable(getattr(value, "to_tuple", None)) and callable(getattr(value, "keys", None))


def output_items(value: Any, output_names: Sequence[str] | None) -> list[tuple[str, Any]]:
    """The model's outputs as (name, value) pairs in graph order (see the module docstring)."""
    if isinstance(value, Mapping) or _is_model_output(value):
        keys = [k for k in value.keys() if value[k] is not None]
        names = list(output_names) if output_names is not None else keys
        unknown = [n for n in names if n not in keys]
        if unknown:
            raise ExportError(f"output_names {unknown} are not keys of the model's output; "
                              f"its keys: {keys}")
        return [(name, value[name]) for name in names]
    values = [value] if isinstance(value, torch.Tensor) else value
    if not isinstance(values, (tuple, list)):
        raise ExportError(
            f"the model returned a {type(value).__name__}; return a tensor, a tuple, a dict or "
            "a ModelOutput of tensors"
        )
    if output_names is None:
        names = ["output"] if isinstance(value, torch.Tensor) else [
            f"output_{i}" for i in range(len(values))
        ]
    else:
        names = list(output_names)
        if len(names) != len(values):
            raise ExportError(f"output_names has {len(names)} names for {len(values)} outputs")
    return list(zip(names, values, strict=True))


class _FlatModel(nn.Module):
    """model(**inputs) as a function of positional tensors returning a flat tuple; also holds
    the export-only state (the ONNX-layout weights of the model's LSTMs, if any)."""

    def __init__(self, model: nn.Module, input_names: Sequence[str],
                 output_names: Sequence[str] | None) -> None:
        super().__init__()
        self.model = model
        self.input_names = tuple(input_names)
        self.requested_names = output_names
        self.lstm_weights = lstm.LSTMWeights(model)

    def forward(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.model(**dict(zip(self.input_names, tensors, strict=True)))
        return tuple(v for _, v in output_items(out, self.requested_names))


@contextmanager
def _eval_mode(model: nn.Module) -> Iterator[None]:
    """Every module in eval mode for the block, then each one's own flag back."""
    flags = {module: module.training for module in model.modules()}
    model.eval()
    try:
        yield
    finally:
        for module, training in flags.items():
            module.training = training


# ----------------------------------------------------------------------------- tracing


@dataclass
class Traced:
    """A traced model: the ONNX graph (functions attached, dims named) and what it came from."""

    proto: onnx.ModelProto
    stages: dict[str, float]
    op_calls: Counter  # attndeploy op calls while tracing, by ONNX op name
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    dynamic_axes: dict[str, dict[int, str]]
    reference: dict[str, torch.Tensor]  # the eager outputs on the example inputs
    dim_bounds: dict[str, tuple[int, int | None]] = field(default_factory=dict)  # narrowed dims


def _trace(
    flat: _FlatModel, example: tuple[torch.Tensor, ...], dims: DimSpec, names: SimpleNamespace,
    opset: int,
) -> tuple[onnx.ModelProto, dict[str, float], Counter, dict[str, tuple[int, int | None]]]:
    """The flat model as an ONNX model (custom nodes still without functions), stage times,
    the attndeploy op calls made while tracing and the dims torch.export narrowed."""
    times: dict[str, float] = {}
    with tracing.tracing_settings():
        started = time.perf_counter()
        tracing.onnx_registry(opset)  # built once per process and opset
        times["registry"] = time.perf_counter() - started
        started = time.perf_counter()
        with tracing.lstm_route(flat.lstm_weights):
            program, refined = export_program(flat, example, dims)
        times["capture"] = time.perf_counter() - started
        calls = tracing.op_calls(program)
        started = time.perf_counter()
        try:
            proto = tracing.to_onnx(program, opset, names).model_proto
        except Exception as exc:  # the translator raises many types; keep its message
            raise ExportError(f"translation to ONNX failed: {tracing.first_lines(exc)}") from exc
        times["translate"] = time.perf_counter() - started
    return proto, times, calls, refined.bounds


def trace_model(
    model: nn.Module,
    *,
    inputs: Mapping[str, torch.Tensor],
    dynamic_shapes: Mapping[str, Mapping[int, Any]] | None = None,
    output_names: Sequence[str] | None = None,
    opset: int = DEFAULT_OPSET,
    inline_functions: bool = False,
) -> Traced:
    """Trace `model(**inputs)` in eval mode to ONNX with the FunctionProtos attached."""
    ExportOptions(opset=opset)  # validates the opset
    bad = [name for name, value in inputs.items() if not isinstance(value, torch.Tensor)]
    if not inputs or bad:
        raise ExportError(f"inputs must be a non-empty dict of tensors; not tensors: {bad}")
    dims = dim_spec(inputs, dynamic_shapes,
                    seq_limit=position_limit(getattr(model, "config", None)))
    dynamic_axes = dims.names
    flat = _FlatModel(model, list(inputs), output_names)
    example = tuple(inputs.values())
    with _eval_mode(model):
        started = time.perf_counter()
        with torch.no_grad():
            items = output_items(model(**inputs), output_names)
        bad = [name for name, value in items if not isinstance(value, torch.Tensor)]
        if bad:
            raise ExportError(f"model outputs {bad} are not tensors")
        reference = {name: value.detach() for name, value in items}
        eager_s = time.perf_counter() - started
        names = SimpleNamespace(input_names=list(inputs), output_names=list(reference))
        proto, stages, calls, bounds = _trace(flat, example, dims, names, opset)
    stages["capture"] = stages.get("capture", 0.0) + eager_s
    tracing.name_dynamic_dims(proto, dynamic_axes)
    tracing.expand_attention_masks(proto)
    proto = tracing.attach_functions(proto, opset, inline_functions, function_protos)
    return Traced(proto, stages, calls, tuple(inputs), tuple(reference), dynamic_axes, reference,
                  bounds)


def check_dynamic_dims(proto: onnx.ModelProto, dynamic_axes: Mapping[str, Mapping[int, str]]):
    """Every declared dynamic axis of an input is still symbolic, under its declared name."""
    for value in proto.graph.input:
        dims = tracing.dims_of(value)
        for axis, want in dynamic_axes.get(value.name, {}).items():
            got = dims[axis] if axis < len(dims) else None
            if got != want:
                raise ExportError(f"{value.name}: dimension {axis} is {got!r}, expected {want!r}"
                                  " (the exporter pinned a dynamic dim)")


def set_metadata(proto: onnx.ModelProto, metadata: Mapping[str, str]) -> None:
    del proto.metadata_props[:]
    for key, value in metadata.items():
        proto.metadata_props.append(onnx.StringStringEntryProto(key=key, value=value))
    proto.producer_name, proto.producer_version = PRODUCER, __version__


def check_model(proto: onnx.ModelProto) -> None:
    try:
        onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as exc:
        raise ExportError(f"the exported model fails onnx.checker: {exc}") from exc


def smoke_check(proto: onnx.ModelProto, traced: Traced, inputs: Mapping[str, torch.Tensor]):
    """One onnxruntime run on the example inputs: the outputs' names, dtypes and shapes are
    PyTorch's, and float outputs are finite. Skipped when onnxruntime is not installed."""
    try:
        import onnxruntime as ort
    except ImportError:
        return
    from attndeploy.runtime.sessions import create_session

    where = f"onnxruntime {ort.__version__} (CPUExecutionProvider)"
    feed = {name: value.detach().cpu().numpy() for name, value in inputs.items()}
    try:
        session = create_session(proto)
        outputs = session.run(list(traced.output_names), feed)
    except Exception as exc:  # onnxruntime raises its own pybind types
        raise ExportError(f"{where} cannot run the exported model: "
                          f"{tracing.first_lines(exc, 3)}") from exc
    for name, got in zip(traced.output_names, outputs, strict=True):
        want = traced.reference[name]
        want_dtype = np.dtype(str(want.dtype).replace("torch.", ""))
        if got.dtype != want_dtype or tuple(got.shape) != tuple(want.shape):
            raise ExportError(f"{where}: output {name} is {got.dtype} {list(got.shape)}, "
                              f"PyTorch gives {want_dtype} {list(want.shape)}")
        if got.dtype.kind == "f" and not np.isfinite(got).all():
            raise ExportError(f"{where}: output {name} holds non-finite values")


def base_metadata(opset: int, inline: bool, traced: Traced) -> dict[str, str]:
    return {
        META_VERSION: __version__,
        META_OPSET: str(opset),
        META_DOMAIN_VERSION: str(DOMAIN_VERSION),
        META_INLINED: "true" if inline else "false",
        META_DYNAMIC_AXES: json.dumps(traced.dynamic_axes, sort_keys=True),
        **({META_DIM_BOUNDS: json.dumps(traced.dim_bounds, sort_keys=True)}
           if traced.dim_bounds else {}),
    }


def export_model(
    model: nn.Module,
    path: Path | str,
    *,
    inputs: Mapping[str, torch.Tensor],
    dynamic_shapes: Mapping[str, Mapping[int, Any]] | None = None,
    output_names: Sequence[str] | None = None,
    opset: int = DEFAULT_OPSET,
    metadata: Mapping[str, str] | None = None,
    inline_functions: bool = False,
) -> ExportResult:
    """Export `model(**inputs)` to `path` (atomically) and check the graph's contract.

    `dynamic_shapes`: {input name: {axis: dim name or torch.export.Dim}}; one name is one dim
    everywhere. A dim the model cannot take at every size (BERT's positions: seq <= 512) is
    narrowed as torch.export suggests and reported in `dim_bounds` and the metadata
    (`attndeploy.dim_bounds`); one it would pin to a single size is an ExportError
    (`attndeploy.export.dims`). `metadata`: more `metadata_props` (strings, written as given).
    Raises ExportError; nothing is written unless every check passes.
    """
    started, cpu_started = time.perf_counter(), time.process_time()
    traced = trace_model(model, inputs=inputs, dynamic_shapes=dynamic_shapes,
                         output_names=output_names, opset=opset,
                         inline_functions=inline_functions)
    finishing = time.perf_counter()
    proto = traced.proto
    custom = tracing.check_custom_nodes(proto, traced.op_calls, inlined=inline_functions)
    check_dynamic_dims(proto, traced.dynamic_axes)
    extra = dict(metadata or {})
    bad = [key for key, value in extra.items() if not (isinstance(key, str)
                                                       and isinstance(value, str))]
    if bad:
        raise ExportError(f"metadata keys and values must be strings: {bad}")
    meta = {**base_metadata(opset, inline_functions, traced), **extra}
    set_metadata(proto, meta)
    check_model(proto)
    stages = {**traced.stages, "finish": time.perf_counter() - finishing}
    checking = time.perf_counter()
    smoke_check(proto, traced, inputs)
    stages["runtime_check"] = time.perf_counter() - checking
    atomic_write_bytes(Path(path), proto.SerializeToString())
    return ExportResult(
        Path(path), time.perf_counter() - started, custom, meta,
        ExportOptions(opset=opset, inline_functions=inline_functions), stages,
        time.process_time() - cpu_started, traced.input_names, traced.output_names,
        traced.dim_bounds,
    )
