"""The parity report's PNG: a histogram of absolute errors per oracle (matplotlib, Agg)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from attndeploy.fsutil import atomic_write_png

if TYPE_CHECKING:
    from attndeploy.validate.report import ValidationReport


def write_error_histogram(report: ValidationReport, path: Path) -> Path:
    """PNG at `path` (atomic): absolute errors (all float outputs, all shapes) per oracle."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 4), dpi=100)
    axes = figure.subplots()
    floor = 1e-12  # exact matches are drawn at the floor of the log axis
    bins = np.logspace(-12, 2, 57)
    drawn = False
    for oracle in report.oracles.values():
        errors = oracle.abs_errors()
        if errors.size:
            values = np.clip(errors.astype(np.float64), floor, bins[-1])
            axes.hist(values, bins=bins, histtype="step", linewidth=1.5,
                      label=f"{oracle.name} (n={errors.size})")
            drawn = True
    axes.axvline(report.tolerance.atol, color="gray", linestyle="--",
                 label=f"atol {report.tolerance.atol:g}")
    axes.set_xscale("log")
    axes.set_xlabel(f"|onnx - torch| (exact matches at {floor:g})")
    axes.set_ylabel("elements")
    verdict = "passed" if report.passed else "FAILED"
    axes.set_title(f"Absolute errors vs PyTorch: {report.model.get('variant')} ({verdict})")
    if drawn:
        axes.legend(fontsize=8)
    figure.tight_layout()
    return atomic_write_png(figure, path)
