"""Parity validation: an exported ONNX model against its PyTorch checkpoint.

`validate_model(checkpoint_dir, onnx_path, ValidationOptions(...)) -> ValidationReport` (and
`validate_module(model, onnx_path, options, feeds=... | grid=...)` for any nn.Module) runs the
PyTorch reference and the oracles (onnxruntime with all / no graph optimizations, the ONNX
reference evaluator, optionally more runners such as the Triton client) over a grid of shapes,
compares every output (`compare`), checks padding invariance (`padding`) and returns a report
that writes JSON, Markdown and a PNG histogram (`report`).
"""

from __future__ import annotations

from attndeploy.validate.compare import (
    DEFAULT_TOLERANCES,
    GATE_FLIP_TOLERANCE,
    CompareResult,
    OutputComparison,
    Tolerance,
    compare_arrays,
    compare_gates,
    compare_outputs,
    default_tolerance,
)
from attndeploy.validate.generic import validate_module
from attndeploy.validate.grid import Shape, default_grid, make_inputs, parse_shapes
from attndeploy.validate.oracles import (
    ORACLES,
    ORT_ALL,
    ORT_NONE,
    REFERENCE,
    ValidationOptions,
)
from attndeploy.validate.report import SCHEMA, SCHEMA_VERSION, ValidationReport
from attndeploy.validate.runners import (
    OrtRunner,
    ReferenceRunner,
    Runner,
    RunnerError,
    TorchRunner,
)
from attndeploy.validate.validator import validate_model

__all__ = [
    "DEFAULT_TOLERANCES",
    "GATE_FLIP_TOLERANCE",
    "ORACLES",
    "ORT_ALL",
    "ORT_NONE",
    "REFERENCE",
    "SCHEMA",
    "SCHEMA_VERSION",
    "CompareResult",
    "OrtRunner",
    "OutputComparison",
    "ReferenceRunner",
    "Runner",
    "RunnerError",
    "Shape",
    "Tolerance",
    "TorchRunner",
    "ValidationOptions",
    "ValidationReport",
    "compare_arrays",
    "compare_gates",
    "compare_outputs",
    "default_grid",
    "default_tolerance",
    "make_inputs",
    "parse_shapes",
    "validate_model",
    "validate_module",
]
