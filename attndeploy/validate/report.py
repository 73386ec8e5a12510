"""The parity report: results as data, written as JSON, Markdown and a PNG histogram.

This module holds the result model and its JSON; the Markdown is rendered in `report_markdown`
and the histogram drawn in `report_plot` (both reached through `ValidationReport`'s methods).
The per-shape and per-oracle results (`ShapeResult`, `OracleResult`, importable from here too)
and what the two renderers read of a report (`ReportView`) live in `results`, below all three,
so neither renderer imports this module back.

JSON schema (`schema` "attndeploy-validation", `schema_version` 1). Floats that are not finite
are written as the strings "inf", "-inf" or "nan" (JSON has no such numbers); statistics that
could not be computed are null.

```
{
  "schema": "attndeploy-validation", "schema_version": 1,
  "passed": bool,                      # every oracle passed and the padding check passed
  "model": {"onnx_path", "checkpoint", "variant", "family", "head", "dtype", "opset",
            "max_seq", "inlined", "weights_sha256", "labels": [str]},
  "reference": {"name": "torch", "description": str},
  "tolerances": {"default": {"atol", "rtol"}, "per_output": {name: {"atol", "rtol"}},
                 "gate_flip_tolerance": float},
  "shapes": [{"shape": "BxS", "batch", "seq", "lengths": [int]}],   # the grid, in order
  "oracles": {
    "<oracle name>": {                 # onnxruntime[all], onnxruntime[none], onnx-reference, ...
      "status": "passed" | "failed" | "unsupported" | "error",
      "passed": bool,                  # status == "passed"
      "message": str,                  # the runtime's message when unsupported / error
      "shapes": ["BxS"],               # shapes this oracle ran (the reference evaluator: a subset)
      "note": str,                     # e.g. why only a subset of shapes
      "seconds": float,
      "results": [{
        "shape": "BxS", "status": "passed" | "failed" | "unsupported" | "error",
        "message": str, "seconds": float,
        "excluded_examples": [int],    # examples left out of float comparisons (accepted flips)
        "outputs": {"<output>": {
          "kind": "float" | "gates", "passed": bool, "shape": [int], "compared": int,
          "failing": int, "message": str, "atol", "rtol",
          "max_abs", "mean_abs", "p99_abs", "max_rel", "mean_rel", "p99_rel",
          "nan_count", "inf_count", "cosine", "min_atol", "min_rtol",
          "argmax_agreement", "argmax_mismatches",   # the family's decision agreement
          "agreement": str | null,                   # its name, e.g. "label agreement"
          # kind "gates" only:
          "flips", "accepted_flips", "flip_tolerance", "flip_margin", "margin",
          "flipped_examples": [int]}}}]}},
  "gates": null | {"flips", "accepted_flips", "refused_flips", "flip_tolerance",
                   "margin", "flip_margin", "compared"},       # GA-Net: summed over oracles
  "padding": null | {"runner": str, "passed": bool, "cases": [
                {"shape", "padded_seq", "extra", "passed", "outputs": {...as above}}]},
  "failures": [{"check": "parity" | "padding" | "runtime", "oracle": str, "shape": "BxS" | null,
                "output": str | null, "message": str}],
  "timings": {"total_s", "load_s", "reference_s", "padding_s", "oracles": {name: s}},
  "environment": {"python", "platform", "attndeploy", "torch", "onnx", "onnxruntime",
                  "numpy", "onnxruntime_providers": [str], "cpu_count"},
  "notes": [str]
}
```

Status: "unsupported" means the runtime said it cannot run this model (onnxruntime
NOT_IMPLEMENTED, a missing execution provider); "error" is any other runtime failure. Neither is
a pass: without a result there is no parity evidence, so `passed` is false and the oracle's
`message` holds the runtime's own words.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from attndeploy.errors import ValidationError
from attndeploy.fsutil import atomic_write_text
from attndeploy.validate.compare import Tolerance, json_float
from attndeploy.validate.grid import Shape
from attndeploy.validate.padding import PaddingCase
from attndeploy.validate.results import OracleResult as OracleResult
from attndeploy.validate.results import ShapeResult as ShapeResult

SCHEMA = "attndeploy-validation"
SCHEMA_VERSION = 1


def environment() -> dict[str, Any]:
    """Versions of everything that computes a number in the report."""
    import onnx
    import onnxruntime
    import torch

    from attndeploy import __version__

    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "attndeploy": __version__,
        "torch": torch.__version__,
        "onnx": onnx.__version__,
        "onnxruntime": onnxruntime.__version__,
        "numpy": np.__version__,
        "onnxruntime_providers": list(onnxruntime.get_available_providers()),
        "cpu_count": os.cpu_count(),
    }


@dataclass
class ValidationReport:
    """Everything one validation found. Truthy when it passed."""

    model: dict[str, Any]
    tolerance: Tolerance
    per_output: dict[str, Tolerance]
    gate_flip_tolerance: float
    shapes: list[tuple[Shape, tuple[int, ...]]]
    oracles: dict[str, OracleResult]
    padding: list[PaddingCase] | None
    padding_runner: str
    gated: bool
    timings: dict[str, Any]
    environment: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    # ---- verdicts
    @property
    def padding_passed(self) -> bool:
        return self.padding is None or all(case.passed for case in self.padding)

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.oracles.values()) and self.padding_passed

    def __bool__(self) -> bool:
        return self.passed

    def raise_for_failure(self) -> None:
        """Raise one ValidationError naming every failure (after writing the report)."""
        if self.passed:
            return
        lines = []
        for f in self.failures():
            where = ", ".join(str(f[k]) for k in ("oracle", "shape", "output") if f[k] is not None)
            lines.append(f"{f['check']} [{where}]: {f['message']}")
        raise ValidationError(
            f"parity validation failed ({len(lines)} failure(s)):\n  " + "\n  ".join(lines)
        )

    def failures(self) -> list[dict[str, Any]]:
        """Every failing (check, oracle, shape, output) with its message."""
        found: list[dict[str, Any]] = []
        for oracle in self.oracles.values():
            if not oracle.results and oracle.status != "passed":
                found.append(_failure("runtime", oracle.name, None, None, oracle.message))
            for r in oracle.results:
                if r.status in ("unsupported", "error"):
                    found.append(_failure("runtime", oracle.name, r.shape, None, r.message))
                elif r.result is not None:
                    for name, out in r.result.outputs.items():
                        if not out:
                            found.append(_failure("parity", oracle.name, r.shape, name,
                                                  out.message))
        for case in self.padding or []:
            for name, out in case.result.outputs.items():
                if not out:
                    found.append(_failure("padding", self.padding_runner, case.shape, name,
                                          f"{out.message} (+{case.extra} padding columns)"))
        return found

    def gate_summary(self) -> dict[str, Any] | None:
        if not self.gated:
            return None
        gates = [
            out
            for oracle in self.oracles.values() for r in oracle.results if r.result is not None
            for out in r.result.outputs.values() if out.kind == "gates" and out.flips is not None
        ]
        margins = [g.margin for g in gates if g.margin is not None]
        flip_margins = [g.flip_margin for g in gates if g.flip_margin is not None]
        flips = sum(g.flips or 0 for g in gates)
        accepted = sum(g.accepted_flips or 0 for g in gates)
        return {
            "flips": flips,
            "accepted_flips": accepted,
            "refused_flips": flips - accepted,
            "flip_tolerance": self.gate_flip_tolerance,
            "margin": min(margins) if margins else None,
            "flip_margin": min(flip_margins) if flip_margins else None,
            "compared": sum(g.compared for g in gates),
        }

    # ---- JSON
    def to_json(self) -> dict[str, Any]:
        data = {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "passed": self.passed,
            "model": self.model,
            "reference": {
                "name": "torch",
                "description": "PyTorch eager, the checkpoint's fp32 model in eval mode",
            },
            "tolerances": {
                "default": self.tolerance.to_json(),
                "per_output": {k: v.to_json() for k, v in self.per_output.items()},
                "gate_flip_tolerance": self.gate_flip_tolerance,
            },
            "shapes": [
                {"shape": str(s), "batch": s.batch, "seq": s.seq, "lengths": list(lengths)}
                for s, lengths in self.shapes
            ],
            "oracles": {name: o.to_json() for name, o in self.oracles.items()},
            "gates": self.gate_summary(),
            "padding": None if self.padding is None else {
                "runner": self.padding_runner,
                "passed": self.padding_passed,
                "cases": [case.to_json() for case in self.padding],
            },
            "failures": self.failures(),
            "timings": self.timings,
            "environment": self.environment,
            "notes": list(self.notes),
        }
        return _sanitize(data)

    def to_json_text(self) -> str:
        return json.dumps(self.to_json(), indent=2, allow_nan=False) + "\n"

    def write_json(self, path: Path) -> Path:
        atomic_write_text(Path(path), self.to_json_text())
        return Path(path)

    # ---- Markdown (report_markdown.py)
    def to_markdown(self) -> str:
        from attndeploy.validate.report_markdown import render_markdown

        return render_markdown(self)

    def write_markdown(self, path: Path) -> Path:
        atomic_write_text(Path(path), self.to_markdown())
        return Path(path)

    # ---- histogram (report_plot.py)
    def write_histogram(self, path: Path) -> Path:
        """PNG: histogram of absolute errors (all float outputs, all shapes) per oracle."""
        from attndeploy.validate.report_plot import write_error_histogram

        return write_error_histogram(self, path)

    def write(self, directory: Path, stem: str = "validation") -> dict[str, Path]:
        """JSON, Markdown and the PNG histogram into `directory`."""
        directory = Path(directory)
        return {
            "json": self.write_json(directory / f"{stem}.json"),
            "markdown": self.write_markdown(directory / f"{stem}.md"),
            "histogram": self.write_histogram(directory / f"{stem}_errors.png"),
        }


def _failure(check: str, oracle: str, shape: Shape | None, output: str | None,
             message: str) -> dict[str, Any]:
    return {"check": check, "oracle": oracle, "shape": None if shape is None else str(shape),
            "output": output, "message": message}


def _sanitize(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _sanitize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_sanitize(v) for v in value]
    if isinstance(value, np.generic):
        return _sanitize(value.item())
    return json_float(value)
