"""The parity report's PNG: a histogram of absolute errors per oracle (matplotlib, Agg).

The log-scale x axis spans the errors drawn (the smallest positive one to the largest, and the
tolerance line) and a little more, so the bars fill it; exact matches, which a log axis cannot
show, are counted in the legend.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from attndeploy.fsutil import atomic_write_png
from attndeploy.validate.results import ReportView

BINS_PER_DECADE = 8
MARGIN_DECADES = 0.25  # room left and right of the outermost error, on the log axis
MIN_BINS = 12


def error_range(errors: list[np.ndarray], atol: float) -> tuple[float, float]:
    """(low, high) for the log axis: the positive finite errors and `atol`, with a margin; one
    decade either side of `atol` (or of 1e-6) when there is no positive error."""
    positive = [e[np.isfinite(e) & (e > 0)] for e in errors]
    values = np.concatenate([*positive, np.array([atol] if atol > 0 else [])])
    if not values.size:
        values = np.array([1e-6])
    low, high = np.log10(values.min()), np.log10(values.max())
    if not any(p.size for p in positive):
        low, high = low - 1.0, high + 1.0
    return 10.0 ** (low - MARGIN_DECADES), 10.0 ** (high + MARGIN_DECADES)


def log_bins(low: float, high: float) -> np.ndarray:
    decades = np.log10(high) - np.log10(low)
    count = max(MIN_BINS, int(np.ceil(decades * BINS_PER_DECADE)))
    return np.logspace(np.log10(low), np.log10(high), count + 1)


def legend_label(name: str, errors: np.ndarray) -> str:
    """`name (n=…)`, plus how many errors are exactly zero or not finite (neither is drawn)."""
    exact = int(np.count_nonzero(errors == 0))
    not_finite = int(np.count_nonzero(~np.isfinite(errors)))
    notes = [f"n={errors.size}"]
    if exact:
        notes.append(f"{exact} exact" if exact < errors.size else "all exact")
    if not_finite:
        notes.append(f"{not_finite} not finite")
    return f"{name} ({', '.join(notes)})"


def write_error_histogram(report: ReportView, path: Path) -> Path:
    """PNG at `path` (atomic): absolute errors (all float outputs, all shapes) per oracle."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 4), dpi=100)
    axes = figure.subplots()
    atol = report.tolerance.atol
    named = [(oracle.name, oracle.abs_errors().astype(np.float64))
             for oracle in report.oracles.values()]
    named = [(name, errors) for name, errors in named if errors.size]
    low, high = error_range([errors for _, errors in named], atol)
    bins = log_bins(low, high)
    for name, errors in named:
        drawn = errors[np.isfinite(errors) & (errors > 0)]
        axes.hist(drawn, bins=bins, histtype="step", linewidth=1.5,
                  label=legend_label(name, errors))
    if atol > 0:
        axes.axvline(atol, color="gray", linestyle="--", label=f"atol {atol:g}")
    axes.set_xscale("log")
    axes.set_xlim(low, high)
    axes.set_xlabel("|onnx - torch| (exact matches are counted in the legend, not drawn)")
    axes.set_ylabel("elements")
    verdict = "passed" if report.passed else "FAILED"
    axes.set_title(f"Absolute errors vs PyTorch: {report.model.get('variant')} ({verdict})")
    if named or atol > 0:
        axes.legend(fontsize=8)
    figure.tight_layout()
    return atomic_write_png(figure, path)
