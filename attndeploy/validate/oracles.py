"""The oracles of a parity check and how one is run, shared by both validators: `validate_model`
(a checkpoint's export, `validator.py`) and `validate_module` (any PyTorch module's, `generic.py`).

An oracle is a runner (onnxruntime with all or no graph optimizations, the ONNX reference
evaluator, or any runner a caller adds) run on every shape's feed and compared with PyTorch's
outputs; `run_oracle` turns that into an `OracleResult` of the report (`results.py`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from attndeploy.check_defaults import INPUT_SEED
from attndeploy.errors import AttnDeployError, ValidationError
from attndeploy.validate.compare import Tolerance, check_tolerance_fields
from attndeploy.validate.grid import Shape, valid_mask
from attndeploy.validate.results import OracleResult, ShapeResult
from attndeploy.validate.runners import OrtRunner, ReferenceRunner, Runner

ORT_ALL = "onnxruntime[all]"
ORT_NONE = "onnxruntime[none]"
REFERENCE = "onnx-reference"
ORACLES = (ORT_ALL, ORT_NONE, REFERENCE)

ProgressCallback = Callable[[int, int, str], None]  # (completed, total, description)
ShapesSpec = str | tuple[Shape | str | tuple[int, int], ...] | list[Any]


@dataclass(frozen=True)
class ValidationOptions:
    """How to validate. None means "the default for this model".

    atol/rtol:          default tolerance; None -> by the graph's dtype (fp32 1e-5/1e-4,
                        fp16 1e-2/1e-2).
    per_output:         {output name: Tolerance or (atol, rtol)} overriding the default.
    shapes:             "1x1,4x17" or a sequence of Shape / "BxS" / (batch, seq);
                        None -> the model family's `validation_grid(max_seq)`
                        (`validate.families`; default `grid.default_grid`).
    reference_shapes:   shapes for the slow ONNX reference evaluator (a subset); None -> the
                        few smallest shapes of the grid; "" or () -> skip it.
    oracles:            which built-in oracles run (ORACLES).
    extra_runners:      more runners (the runner interface, e.g. TritonRunner), run on every shape.
    providers/threads:  onnxruntime execution providers and intra-op threads.
    gate_flip_tolerance: GA-Net flips accepted where |gate logit| < this; None -> 1e-4
                        (fp32, docs/variants.md §3.6) or 1e-2 (fp16).
    padding_check:      check that extra right padding leaves outputs unchanged (onnxruntime).
    progress:           a callback (completed, total, description) or a rich `Progress`.
    """

    atol: float | None = None
    rtol: float | None = None
    per_output: Mapping[str, Tolerance | tuple[float, float]] = field(default_factory=dict)
    shapes: ShapesSpec | None = None
    reference_shapes: ShapesSpec | None = None
    oracles: tuple[str, ...] = ORACLES
    extra_runners: tuple[Runner, ...] = ()
    providers: tuple[str, ...] | None = None
    threads: int | None = None
    seed: int = INPUT_SEED
    gate_flip_tolerance: float | None = None
    padding_check: bool = True
    progress: Any = field(default=None, compare=False)

    def __post_init__(self) -> None:
        check_tolerance_fields(self)
        unknown = [o for o in self.oracles if o not in ORACLES]
        if unknown:
            raise ValidationError(
                f"unknown oracle(s) {', '.join(unknown)}; valid: {', '.join(ORACLES)}"
            )
        if self.threads is not None and self.threads < 1:
            raise ValidationError(f"threads must be >= 1, got {self.threads}")
        for name, tol in self.per_output.items():
            atol, rtol = (tol.atol, tol.rtol) if isinstance(tol, Tolerance) else tol
            if not (atol >= 0 and rtol >= 0):
                raise ValidationError(f"tolerance of {name!r} must be >= 0, got {tol}")


class Progress:
    """Adapts a callback or a rich Progress to (completed, total, description) updates."""

    def __init__(self, target: Any, total: int) -> None:
        self.total, self.done = total, 0
        self.callback: ProgressCallback | None = None
        self.rich, self.task = None, None
        if target is None:
            return
        if hasattr(target, "add_task") and hasattr(target, "update"):
            self.rich = target
            self.task = target.add_task("validate", total=total)
        elif callable(target):
            self.callback = target
        else:
            raise ValidationError("progress must be a callable or a rich Progress")

    def step(self, description: str) -> None:
        self.done += 1
        if self.callback is not None:
            self.callback(self.done, self.total, description)
        if self.rich is not None:
            self.rich.update(self.task, completed=self.done, description=description)

    def finish(self) -> None:
        """Complete the bar when steps were skipped (an oracle that could not run)."""
        if self.done < self.total:
            self.done = self.total - 1
            self.step("done")


def builtin_runner(name: str, path: Path, options: ValidationOptions) -> Runner:
    if name == REFERENCE:
        return ReferenceRunner(path)
    optimization = "all" if name == ORT_ALL else "none"
    return OrtRunner(path, optimization, providers=options.providers, threads=options.threads)


def run_oracle(
    runner: Runner,
    shapes: tuple[Shape, ...],
    feeds: dict[Shape, dict[str, np.ndarray]],
    expected: dict[Shape, dict[str, np.ndarray]],
    compare: Callable[[dict, dict, np.ndarray], Any],
    progress: Progress,
    note: str = "",
    valid_of: Callable[[dict[str, np.ndarray]], np.ndarray] = valid_mask,
) -> OracleResult:
    """Run `runner` on every shape's feed and compare with `expected`; `valid_of(feed)` gives
    the real tokens bool [B, T] (default: the feed's `attention_mask`)."""
    oracle = OracleResult(runner.name, note=note)
    started = time.perf_counter()
    try:
        runner.__enter__()
    except AttnDeployError as exc:
        oracle.status = "unsupported" if getattr(exc, "unsupported", False) else "error"
        oracle.message = getattr(exc, "runtime_message", str(exc))
        oracle.seconds = time.perf_counter() - started
        for shape in shapes:
            progress.step(f"{runner.name} {shape}: {oracle.status}")
        return oracle
    try:
        for shape in shapes:
            t0 = time.perf_counter()
            try:
                got = runner.infer(feeds[shape])
            except AttnDeployError as exc:
                status = "unsupported" if getattr(exc, "unsupported", False) else "error"
                message = getattr(exc, "runtime_message", str(exc))
                oracle.results.append(
                    ShapeResult(shape, time.perf_counter() - t0, None, status, message)
                )
            else:
                result = compare(got, expected[shape], valid_of(feeds[shape]))
                failed = "; ".join(f"{n}: {result.outputs[n].message}" for n in result.failures)
                oracle.results.append(ShapeResult(
                    shape, time.perf_counter() - t0, result,
                    "passed" if result else "failed", failed,
                ))
            progress.step(f"{runner.name} {shape}")
    finally:
        runner.__exit__(None, None, None)
    oracle.seconds = time.perf_counter() - started
    oracle.settle()
    return oracle
