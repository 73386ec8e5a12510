"""The decoder comparison's PNG (matplotlib, Agg, written atomically): left, the logits' largest
|a - b| by step; right, each layer's cache relative error by layer, one line per step (later
steps darker), log scale as `plot.write_error_plot`."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from attndeploy.debug.plot import FLOOR
from attndeploy.fsutil import atomic_write_png


def write_decoder_plot(report: Any, path: Path) -> Path:
    """`report`: a `decoder_report.DecoderDebugReport`."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    figure = Figure(figsize=(10, 4.2), dpi=100)
    left, right = figure.subplots(1, 2)
    steps = [s.step for s in report.steps]
    left.plot(steps, [max(s.logits.max_abs, FLOOR) for s in report.steps], marker="o",
              color="tab:blue", label="logits max |a - b|")
    left.axhline(report.tolerance.atol, color="gray", linestyle="--",
                 label=f"atol {report.tolerance.atol:g}")
    left.set_yscale("log")
    left.set_xlabel("step (0 = prefill)")
    left.legend(fontsize=7)
    layers = report.layers()
    colors = matplotlib.colormaps["viridis"]
    for index, step in enumerate(steps):
        right.plot(range(len(layers)), [max(layer.rel_error[index], FLOOR) for layer in layers],
                   color=colors(index / max(len(steps) - 1, 1)), linewidth=1,
                   label=f"step {step}" if index in (0, len(steps) - 1) else None)
    right.set_yscale("log")
    right.set_xticks(range(len(layers)))
    right.set_xticklabels([layer.layer for layer in layers], fontsize=7)
    right.set_xlabel("layer (cache entries)")
    right.set_ylabel("||a - b|| / ||b||")
    right.legend(fontsize=7)
    verdict = textwrap.fill(report.verdict, 130)  # a long verdict wraps rather than being cut
    figure.suptitle(f"{Path(report.candidate).name} against {Path(report.reference).name}:\n"
                    f"{verdict}", fontsize=9)
    figure.tight_layout()
    return atomic_write_png(figure, path)
