"""The comparison's PNG: error by layer in graph order, log scale (matplotlib, Agg), written
atomically.

`DebugReport.write_plot` (debug/report.py) calls it, so this module does not import the report:
it names what it reads of one as `PlottedReport`, which a `DebugReport` is.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from attndeploy.fsutil import atomic_write_png
from attndeploy.validate.compare import Tolerance


class PlottedLayer(Protocol):
    """What the plot reads of one layer (a `debug.report.LayerResult`)."""

    @property
    def kind(self) -> str: ...
    @property
    def label(self) -> str: ...
    @property
    def passed(self) -> bool: ...
    @property
    def max_abs(self) -> float | None: ...
    @property
    def rel_error(self) -> float | None: ...


class PlottedReport(Protocol):
    """What the plot reads of a comparison (a `debug.report.DebugReport`)."""

    @property
    def reference(self) -> str: ...
    @property
    def candidate(self) -> str: ...
    @property
    def tolerance(self) -> Tolerance: ...
    @property
    def layers(self) -> Sequence[PlottedLayer]: ...
    @property
    def first_divergence(self) -> PlottedLayer | None: ...


FLOOR = 1e-12  # exact agreement is drawn at the floor of the log axis
MARKERS = {"node": "o", "block": "s", "output": "D"}


def write_error_plot(report: PlottedReport, path: Path) -> Path:
    """PNG at `path`: each layer's largest |a - b| and ||a - b|| / ||b||, the tolerance, and
    the first divergence marked."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    layers = report.layers
    figure = Figure(figsize=(max(6.0, 0.45 * len(layers) + 2), 4.2), dpi=100)
    axes = figure.subplots()
    positions = range(len(layers))
    absolute = [max(layer.max_abs or 0.0, FLOOR) for layer in layers]
    relative = [max(layer.rel_error or 0.0, FLOOR) for layer in layers]
    axes.plot(positions, absolute, color="tab:blue", linewidth=1, label="max |a - b|")
    axes.plot(positions, relative, color="tab:orange", linewidth=1, linestyle=":",
              label="||a - b|| / ||b||")
    for kind, marker in MARKERS.items():
        chosen = [i for i, layer in enumerate(layers) if layer.kind == kind]
        if chosen:
            axes.scatter(chosen, [absolute[i] for i in chosen], marker=marker, s=28,
                         color=["tab:red" if not layers[i].passed else "tab:blue"
                                for i in chosen], zorder=3, label=f"{kind}s")
    axes.axhline(report.tolerance.atol, color="gray", linestyle="--",
                 label=f"atol {report.tolerance.atol:g}")
    first = report.first_divergence
    if first is not None:
        axes.axvline(layers.index(first), color="tab:red", linewidth=0.8, alpha=0.6)
    axes.set_yscale("log")
    axes.set_xticks(list(positions))
    axes.set_xticklabels([layer.label for layer in layers], rotation=60, ha="right", fontsize=7)
    axes.set_ylabel(f"error (exact at {FLOOR:g})")
    title = "no divergence" if first is None else f"first divergence: {first.label}"
    axes.set_title(f"{Path(report.candidate).name} against {Path(report.reference).name}:\n"
                   f"{title}", fontsize=9)  # two lines: a long file name cut the verdict off
    axes.legend(fontsize=7)
    figure.tight_layout()
    return atomic_write_png(figure, path)
