"""The tuning result as a picture: `write_plot` draws the Pareto front of throughput against p95
(every measured level a dot, the front a line, the chosen point a star, the package default's
levels in orange, the latency budget a dashed line) and, beside it, the chosen configuration,
the package default and in-process onnxruntime by concurrency level."""

from __future__ import annotations

from pathlib import Path

from attndeploy.fsutil import atomic_write_png
from attndeploy.serving.tune.measure import REPEAT
from attndeploy.serving.tune.result import TuneResult, in_process_batch


def write_plot(result: TuneResult, path: Path) -> Path:
    """PNG of the Pareto front and the references (written atomically)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(13, 5), dpi=110)
    FigureCanvasAgg(figure)
    front_axes, bars = figure.subplots(1, 2)
    points = [(m, p) for m in result.measurements if m.role != REPEAT for p in m.levels if p.ok]
    front_axes.scatter([p.throughput for _, p in points], [p.p95_ms for _, p in points],
                       s=14, color="0.65", label="measured (candidate, concurrency)")
    front = result.pareto()
    front_axes.plot([p.throughput for p in front], [p.p95_ms for p in front], "o-",
                    color="tab:blue", label="Pareto front")
    default = result.default_measurement
    if default is not None:
        good = [p for p in default.levels if p.ok]
        front_axes.plot([p.throughput for p in good], [p.p95_ms for p in good], "s--",
                        color="tab:orange", label=f"package default {default.candidate.name}")
    level = result.chosen_level
    if result.chosen is not None and level is not None:
        front_axes.plot([level.throughput], [level.p95_ms], "*", color="tab:red", markersize=16,
                        label=f"chosen {result.chosen.candidate.name} (c{level.concurrency})")
    if result.budget_ms is not None:
        front_axes.axhline(result.budget_ms, color="k", linestyle=":",
                           label=f"p95 budget {result.budget_ms:g} ms")
    front_axes.set_xlabel("throughput (inferences/s)")
    front_axes.set_ylabel("p95 latency (ms)")
    front_axes.set_yscale("log")
    front_axes.grid(True, alpha=0.3)
    front_axes.legend(fontsize=7)
    front_axes.set_title(f"{result.target.model}: throughput against p95"
                         + (" (partial)" if result.partial else ""), fontsize=10)

    levels = list(result.options.concurrency)
    width = 0.27
    series = []
    if result.chosen is not None:
        series.append(("chosen", result.chosen, "tab:red"))
    if default is not None:
        series.append(("package default", default, "tab:orange"))
    for offset, (label, measurement, color) in enumerate(series):
        values = [(measurement.at(c).throughput if measurement.at(c) is not None else 0.0)
                  for c in levels]
        bars.bar([i + (offset - 1) * width for i in range(len(levels))], values, width,
                 label=label, color=color)
    if result.chosen is not None and result.in_process:
        by_batch = {p.batch_size: p.throughput for p in result.in_process}
        values = []
        for c in levels:
            point = result.chosen.at(c)
            values.append(by_batch.get(in_process_batch(point), 0.0) if point else 0.0)
        bars.bar([i + width for i in range(len(levels))], values, width,
                 label="in-process onnxruntime (chosen's batch size)", color="tab:green")
    bars.set_xticks(range(len(levels)), [f"c{c}" for c in levels])
    bars.set_ylabel("throughput (inferences/s)")
    bars.set_title("by concurrency level", fontsize=10)
    bars.legend(fontsize=7)
    bars.grid(True, axis="y", alpha=0.3)
    figure.tight_layout()
    return atomic_write_png(figure, Path(path))
