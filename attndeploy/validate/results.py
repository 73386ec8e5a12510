"""The parts of a parity report below it: one oracle's result at one shape (`ShapeResult`), one
oracle's over its shapes (`OracleResult`), and what the report's renderers read of a whole
report (`ReportView`, which a `report.ValidationReport` is).

`report.py` builds and writes the report; it renders the Markdown through `report_markdown` and
draws the histogram through `report_plot`, which read the report as a `ReportView`. These
parts live here, below all three, so that neither renderer imports the report back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from attndeploy.validate.compare import CompareResult, Tolerance
from attndeploy.validate.grid import Shape
from attndeploy.validate.padding import PaddingCase

STATUSES = ("passed", "failed", "unsupported", "error")


@dataclass
class ShapeResult:
    """One oracle at one shape: a comparison, or the runtime's error."""

    shape: Shape
    seconds: float
    result: CompareResult | None = None
    status: str = "passed"
    message: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def to_json(self) -> dict[str, Any]:
        return {
            "shape": str(self.shape),
            "status": self.status,
            "message": self.message,
            "seconds": round(self.seconds, 4),
            "excluded_examples": list(self.result.excluded_examples) if self.result else [],
            "outputs": (
                {name: r.to_json() for name, r in self.result.outputs.items()}
                if self.result else {}
            ),
        }


@dataclass
class OracleResult:
    """One runner against the reference over its shapes."""

    name: str
    results: list[ShapeResult] = field(default_factory=list)
    status: str = "passed"
    message: str = ""
    note: str = ""
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def settle(self) -> None:
        """Derive the status from the per-shape results (a load failure is set directly)."""
        if self.status in ("unsupported", "error") and not self.results:
            return
        statuses = {r.status for r in self.results}
        for status in ("error", "unsupported", "failed"):
            if status in statuses:
                self.status = status
                first = next(r for r in self.results if r.status == status)
                self.message = self.message or first.message
                return
        self.status = "passed"

    def abs_errors(self) -> np.ndarray:
        parts = [
            out.abs_errors
            for r in self.results if r.result is not None
            for out in r.result.outputs.values() if out.abs_errors is not None
        ]
        return np.concatenate(parts) if parts else np.zeros(0, np.float32)

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "passed": self.passed,
            "message": self.message,
            "shapes": [str(r.shape) for r in self.results],
            "note": self.note,
            "seconds": round(self.seconds, 4),
            "results": [r.to_json() for r in self.results],
        }


class ReportView(Protocol):
    """What the Markdown and the histogram read of a report (a `report.ValidationReport`)."""

    @property
    def model(self) -> Mapping[str, Any]: ...
    @property
    def passed(self) -> bool: ...
    @property
    def tolerance(self) -> Tolerance: ...
    @property
    def per_output(self) -> Mapping[str, Tolerance]: ...
    @property
    def shapes(self) -> Sequence[tuple[Shape, tuple[int, ...]]]: ...
    @property
    def oracles(self) -> Mapping[str, OracleResult]: ...
    @property
    def padding(self) -> Sequence[PaddingCase] | None: ...
    @property
    def padding_runner(self) -> str: ...
    @property
    def padding_passed(self) -> bool: ...
    @property
    def timings(self) -> Mapping[str, Any]: ...
    @property
    def environment(self) -> Mapping[str, Any]: ...
    @property
    def notes(self) -> Sequence[str]: ...
    def gate_summary(self) -> dict[str, Any] | None: ...
    def failures(self) -> list[dict[str, Any]]: ...
