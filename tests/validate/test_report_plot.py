"""The parity histogram (attndeploy/validate/report_plot.py), checked on the matplotlib objects
before they are written: the log axis fits the errors, exact matches are counted, not lost."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attndeploy.validate import report_plot
from attndeploy.validate.compare import CompareResult, OutputComparison, Tolerance
from attndeploy.validate.grid import Shape
from attndeploy.validate.report import OracleResult, ShapeResult, ValidationReport


def oracle(name: str, errors: np.ndarray) -> OracleResult:
    compared = OutputComparison("logits", "float", True, (errors.size,), errors.size, 0,
                                abs_errors=errors.astype(np.float32))
    return OracleResult(name, [ShapeResult(Shape(1, 8), 0.0, CompareResult({"logits": compared}))])


def report_of(*oracles: OracleResult, atol: float = 1e-5) -> ValidationReport:
    return ValidationReport(
        model={"variant": "standard"}, tolerance=Tolerance(atol, 1e-4), per_output={},
        gate_flip_tolerance=0.0, shapes=[], oracles={o.name: o for o in oracles}, padding=None,
        padding_runner="onnxruntime[all]", gated=False, timings={}, environment={},
    )


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The axes of the figure the histogram would write."""
    captured: list[Any] = []

    def keep(figure: Any, path: Path, **_: Any) -> Path:
        captured.append(figure.axes[0])
        return path

    monkeypatch.setattr(report_plot, "atomic_write_png", keep)
    return captured


def decades(low: float, high: float) -> float:
    return float(np.log10(high) - np.log10(low))


def test_the_axis_spans_the_errors_and_the_tolerance_with_a_small_margin(drawn) -> None:
    errors = np.array([0.0, 0.0, 3e-9, 2e-8, 5e-7, 1e-6])
    report_plot.write_error_histogram(report_of(oracle("onnxruntime[all]", errors)), Path("x"))
    (axes,) = drawn
    low, high = axes.get_xlim()
    assert axes.get_xscale() == "log"
    assert low <= 3e-9 and high >= 1e-5  # the smallest positive error, the atol line
    assert decades(low, high) <= decades(3e-9, 1e-5) + 1.0  # no empty decades around them
    (histogram,) = axes.patches
    drawn_x = histogram.get_path().vertices[:, 0]
    assert drawn_x.min() >= low and drawn_x.max() <= high


def test_exact_matches_are_counted_in_the_legend(drawn) -> None:
    errors = np.array([0.0, 0.0, 0.0, 1e-7, np.inf])
    exact = np.zeros(4)
    report = report_of(oracle("onnxruntime[all]", errors), oracle("onnx-reference", exact))
    report_plot.write_error_histogram(report, Path("x"))
    texts = [t.get_text() for t in drawn[0].get_legend().get_texts()]
    assert texts == ["onnxruntime[all] (n=5, 3 exact, 1 not finite)",
                     "onnx-reference (n=4, all exact)", "atol 1e-05"]


def test_the_axis_follows_errors_far_above_the_tolerance(drawn) -> None:
    errors = np.array([1e-3, 0.5, 2.0])
    report_plot.write_error_histogram(report_of(oracle("onnxruntime[all]", errors)), Path("x"))
    low, high = drawn[0].get_xlim()
    assert low <= 1e-5 and high >= 2.0
    assert decades(low, high) <= decades(1e-5, 2.0) + 1.0


def test_only_exact_matches_still_give_an_axis_around_the_tolerance(drawn) -> None:
    report_plot.write_error_histogram(report_of(oracle("x", np.zeros(3))), Path("x"))
    low, high = drawn[0].get_xlim()
    assert 0 < low < 1e-5 < high and decades(low, high) <= 3.0


def test_the_histogram_is_written_as_png(tmp_path: Path) -> None:
    errors = np.array([0.0, 1e-8, 1e-7])
    path = report_plot.write_error_histogram(report_of(oracle("x", errors)), tmp_path / "h.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
