"""The result of a load test as data: `LevelResult` per load level, `LoadTestReport` for the run,
written as JSON, CSV (one row per level) and a PNG latency-throughput curve whose points
`place_point_labels` labels (the quickstart's curves of several models use it too).

JSON schema (`LoadTestReport.to_json()`, `schema` = "attndeploy.loadtest/1"); times in ms unless
the name says otherwise, `null` where nothing was measured:

    {
      "schema": "attndeploy.loadtest/1",
      "passed": bool,                 # every level: measured, no errors, no failed checks
      "partial": bool,                # an error ended the test part-way; the levels measured
      "partial_reason": str | null,   #   until then, the interrupted one last ("aborted")
      "failures": [str],              # why not passed (empty when passed)
      "warnings": [str],              # unstable levels, skipped checks, count disagreement > 5 %
      "url": str, "model": str,
      "started_at": str,              # ISO 8601, UTC
      "duration_s": float,
      "config": {...},                # LoadTestConfig as given (paths as strings)
      "levels": [{
        "label": str,                 # "concurrency 4" | "rate 50/s poisson"
        "mode": "concurrency" | "request_rate",
        "concurrency": int | null, "request_rate": float | null, "distribution": str | null,
        "batch": int, "seq_lengths": [int],
        "stable": bool,               # last `stable_windows` windows within the threshold
        "stop_reason": "stable" | "max_windows" | "time_limit" | "all_failed" | "aborted",
        "windows": [{"index", "duration_s", "requests", "errors", "throughput_rps",
                     "p50_ms", "p95_ms", "measured"}],
        "measured_windows": int, "measured_s": float,
        "request_count": int,         # successful requests in the measured windows
        "throughput_infer_per_s": float,     # rows (request_count * batch) per second
        "throughput_requests_per_s": float,
        "latency_ms": {"count", "avg", "min", "p50", "p90", "p95", "p99", "max"},
        "error_count": int,           # failed requests over the whole level, warm-up included
        "errors": {status: count},    # e.g. {"StatusCode.INTERNAL": 3}
        "error_samples": {status: first message},
        "server": {                   # Triton statistics over the measured windows
          "request_count": int, "inference_count": int, "execution_count": int,
          "avg_batch_size": float | null,
          "queue_us": float | null, "compute_input_us": float | null,
          "compute_infer_us": float | null, "compute_output_us": float | null,
          "request_us": float | null  # server-side time per successful request
        } | null,
        "client_inference_count": int,       # responses in the measured windows (errors
                                             # included) * batch
        "count_rel_diff": float | null,      # |server - client| / client inference counts
        "checks": {"done": int, "failed": int, "max_abs_error": float | null,
                   "gate_mismatches": int, "first_failure": str},
        "delayed_requests": int,      # request-rate mode: issued > 1 ms after their schedule
        "max_schedule_lag_ms": float,
        "warmup_requests": int,
        "duration_s": float           # the whole level, warm-up and drain included
      }]
    }
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from attndeploy.errors import LoadTestError
from attndeploy.fsutil import atomic_write_png, atomic_write_text

SCHEMA = "attndeploy.loadtest/1"
COUNT_AGREEMENT = 0.05  # server vs client inference count: above this a warning


@dataclass(frozen=True)
class CheckSummary:
    """Responses compared with in-process onnxruntime during one level."""

    done: int = 0
    failed: int = 0
    max_abs_error: float | None = None
    gate_mismatches: int = 0
    first_failure: str = ""


@dataclass(frozen=True)
class LevelResult:
    """Everything measured at one load level (see the module docstring for the meaning)."""

    label: str
    mode: str
    concurrency: int | None
    request_rate: float | None
    distribution: str | None
    batch: int
    seq_lengths: list[int]
    stable: bool
    stop_reason: str
    windows: list[dict[str, Any]]
    measured_windows: int
    measured_s: float
    request_count: int
    throughput_infer_per_s: float
    throughput_requests_per_s: float
    latency_ms: dict[str, float | int | None]
    error_count: int
    errors: dict[str, int]
    error_samples: dict[str, str]
    server: dict[str, float | int | None] | None
    client_inference_count: int
    count_rel_diff: float | None
    checks: CheckSummary
    delayed_requests: int
    max_schedule_lag_ms: float
    warmup_requests: int
    duration_s: float

    @property
    def failures(self) -> list[str]:
        """Why this level fails (empty when it passes)."""
        out = []
        if self.measured_windows == 0:
            out.append(f"{self.label}: no measurement window completed ({self.stop_reason})")
        if self.error_count:
            kinds = ", ".join(f"{k} x{n}" for k, n in sorted(self.errors.items()))
            sample = next(iter(self.error_samples.values()), "")
            out.append(f"{self.label}: {self.error_count} failed request(s) ({kinds}): {sample}")
        if self.checks.failed:
            out.append(
                f"{self.label}: {self.checks.failed} of {self.checks.done} checked responses "
                f"differ from onnxruntime: {self.checks.first_failure}"
            )
        return out


CSV_COLUMNS = (
    "label", "mode", "concurrency", "request_rate", "distribution", "batch", "seq_lengths",
    "stable", "stop_reason", "measured_windows", "measured_s", "request_count",
    "throughput_infer_per_s", "throughput_requests_per_s",
    "latency_avg_ms", "latency_p50_ms", "latency_p90_ms", "latency_p95_ms", "latency_p99_ms",
    "error_count", "server_queue_us", "server_compute_input_us", "server_compute_infer_us",
    "server_compute_output_us", "avg_batch_size", "server_inference_count",
    "client_inference_count", "count_rel_diff", "checks_done", "checks_failed",
    "max_abs_error", "delayed_requests",
)


def _csv_row(level: LevelResult) -> dict[str, Any]:
    server = level.server or {}
    latency = level.latency_ms
    return {
        "label": level.label,
        "mode": level.mode,
        "concurrency": level.concurrency,
        "request_rate": level.request_rate,
        "distribution": level.distribution,
        "batch": level.batch,
        "seq_lengths": " ".join(str(s) for s in level.seq_lengths),
        "stable": level.stable,
        "stop_reason": level.stop_reason,
        "measured_windows": level.measured_windows,
        "measured_s": level.measured_s,
        "request_count": level.request_count,
        "throughput_infer_per_s": level.throughput_infer_per_s,
        "throughput_requests_per_s": level.throughput_requests_per_s,
        **{f"latency_{k}_ms": latency.get(k) for k in ("avg", "p50", "p90", "p95", "p99")},
        "error_count": level.error_count,
        **{
            f"server_{k}_us": server.get(f"{k}_us")
            for k in ("queue", "compute_input", "compute_infer", "compute_output")
        },
        "avg_batch_size": server.get("avg_batch_size"),
        "server_inference_count": server.get("inference_count"),
        "client_inference_count": level.client_inference_count,
        "count_rel_diff": level.count_rel_diff,
        "checks_done": level.checks.done,
        "checks_failed": level.checks.failed,
        "max_abs_error": level.checks.max_abs_error,
        "delayed_requests": level.delayed_requests,
    }


def finite_json(value: Any) -> Any:
    """JSON has no NaN/Inf: write them as null (recursively)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite_json(v) for v in value]
    return value


@dataclass(frozen=True)
class LoadTestReport:
    """A whole load test; truthy when it passed. Write it with `write_json/csv/plot/all`."""

    url: str
    model: str
    started_at: str
    duration_s: float
    config: dict[str, Any]
    levels: list[LevelResult]
    notes: list[str] = field(default_factory=list)
    partial_reason: str | None = None  # set when an error ended the test part-way

    @property
    def partial(self) -> bool:
        return self.partial_reason is not None

    @property
    def failures(self) -> list[str]:
        stopped = [f"the load test stopped early: {self.partial_reason}"] if self.partial else []
        return stopped + [failure for level in self.levels for failure in level.failures]

    @property
    def passed(self) -> bool:
        return bool(self.levels) and not self.failures

    def __bool__(self) -> bool:
        return self.passed

    @property
    def warnings(self) -> list[str]:
        out = list(self.notes)
        for level in self.levels:
            if level.measured_windows and not level.stable:
                out.append(
                    f"{level.label}: not stable within {level.measured_windows} measured "
                    f"window(s) ({level.stop_reason}); treat its numbers as approximate"
                )
            diff = level.count_rel_diff
            if diff is not None and diff > COUNT_AGREEMENT:
                out.append(
                    f"{level.label}: the server's inference count differs from the client's by "
                    f"{diff:.1%} over the measured windows (is another client using the model?)"
                )
        return out

    def to_dict(self) -> dict[str, Any]:
        body = {
            "schema": SCHEMA,
            "passed": self.passed,
            "partial": self.partial,
            "partial_reason": self.partial_reason,
            "failures": self.failures,
            "warnings": self.warnings,
            "url": self.url,
            "model": self.model,
            "started_at": self.started_at,
            "duration_s": self.duration_s,
            "config": self.config,
            "levels": [asdict(level) for level in self.levels],
        }
        return dict(finite_json(body))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def raise_if_failed(self) -> None:
        """Raise one LoadTestError listing every failure (no-op when passed)."""
        if not self.passed:
            reasons = "\n".join(f"- {f}" for f in self.failures) or "- no load level ran"
            raise LoadTestError(f"The load test of '{self.model}' at {self.url} failed:\n{reasons}")

    # ---- files (all written atomically)
    def write_json(self, path: Path) -> Path:
        atomic_write_text(Path(path), self.to_json())
        return Path(path)

    def write_csv(self, path: Path) -> Path:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, lineterminator="\n")
        writer.writeheader()
        for level in self.levels:
            writer.writerow(_csv_row(level))
        atomic_write_text(Path(path), buffer.getvalue())
        return Path(path)

    def write_plot(self, path: Path) -> Path:
        """PNG: p50 and p95 latency against throughput, one point per level, labelled beside its
        p95 point without covering another label or leaving the axes."""
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        figure = Figure(figsize=(7, 4.5), dpi=110)
        FigureCanvasAgg(figure)
        axes = figure.add_subplot(1, 1, 1)
        points = [lv for lv in self.levels if lv.latency_ms.get("p50") is not None]
        x = [lv.throughput_infer_per_s for lv in points]
        for key, style in (("p50", "o-"), ("p95", "s--")):
            axes.plot(x, [lv.latency_ms[key] for lv in points], style, label=f"{key} latency")
        axes.set_xlabel("throughput (infer/s)")
        axes.set_ylabel("latency (ms)")
        axes.set_title(f"{self.model} @ {self.url}")
        axes.grid(True, alpha=0.3)
        axes.margins(0.08)
        if points:
            axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
        place_point_labels(
            axes, [(xi, lv.latency_ms["p95"], lv.label) for lv, xi in zip(points, x, strict=True)],
            avoid=[(xi, lv.latency_ms["p50"]) for lv, xi in zip(points, x, strict=True)],
            fontsize=8,
        )
        return atomic_write_png(figure, path, bbox_inches="tight")

    def write_all(self, directory: Path, stem: str = "loadtest") -> dict[str, Path]:
        """`<stem>.json`, `<stem>.csv` and `<stem>.png` in `directory`; returns them by kind."""
        directory = Path(directory)
        return {
            "json": self.write_json(directory / f"{stem}.json"),
            "csv": self.write_csv(directory / f"{stem}.csv"),
            "png": self.write_plot(directory / f"{stem}.png"),
        }


LABEL_DIRECTIONS = ((1, 1), (1, -1), (-1, 1), (-1, -1), (0, 1), (0, -1), (1, 0), (-1, 0))
LABEL_DISTANCES_PT = (6.0, 10.0, 16.0, 24.0)  # from the point; the first clears its marker
LABEL_ALIGNMENT = {1: ("left", "bottom"), 0: ("center", "center"), -1: ("right", "top")}
MARKER_HALF_PT = 3.5  # half a default marker (6 pt) and a little: kept clear of labels


def place_point_labels(
    axes: Any, labels: Sequence[tuple[float, float, str]], *,
    avoid: Sequence[tuple[float, float]] = (), fontsize: float = 7.0, merge_px: float = 20.0,
) -> list[Any]:
    """Annotate data points so that no two labels overlap and none leaves the axes.

    `labels` are (x, y, text) in data coordinates. Points with the same text closer than
    `merge_px` pixels share one label. Each label takes the first free spot around its point(s),
    nearest first: one whose text lies inside the axes and covers neither a label placed before
    nor a marker (the labelled points and `avoid`); where none is free, the spot that overlaps
    least. Call it once the axes' limits and size are final; returns the annotations.
    """
    figure = axes.figure
    axes.get_xlim(), axes.get_ylim()  # settle pending autoscaling before measuring pixels
    renderer = figure.canvas.get_renderer()
    to_pixels = axes.transData.transform
    frame = axes.get_window_extent(renderer)
    half = MARKER_HALF_PT * figure.dpi / 72.0
    markers = [(px, py) for px, py in to_pixels([(x, y) for x, y, _ in labels] + list(avoid))]
    taken = [(px - half, py - half, px + half, py + half) for px, py in markers]
    annotations = []
    for text, members in _label_groups(labels, markers[:len(labels)], merge_px):
        annotation = axes.annotate(text, xy=(0.0, 0.0), xytext=(0.0, 0.0),
                                   textcoords="offset points", fontsize=fontsize,
                                   annotation_clip=False)
        best_cost, best_spot = (True, math.inf), None
        for distance, (sx, sy) in itertools.product(LABEL_DISTANCES_PT, LABEL_DIRECTIONS):
            index = max(members, key=lambda i: sx * markers[i][0] + sy * markers[i][1])
            spot = (labels[index][0], labels[index][1], (sx * distance, sy * distance),
                    LABEL_ALIGNMENT[sx][0], LABEL_ALIGNMENT[sy][1])
            box = _try_spot(annotation, spot, renderer)
            cost = (not _inside(box, frame), sum(_overlap(box, other) for other in taken))
            if best_spot is None or cost < best_cost:
                best_cost, best_spot = cost, spot
            if cost == (False, 0.0):  # free: inside the axes, on nothing
                break
        taken.append(_try_spot(annotation, best_spot, renderer))
        annotations.append(annotation)
    return annotations


def _label_groups(labels: Sequence[tuple[float, float, str]], pixels: Sequence[Any],
                  merge_px: float) -> list[tuple[str, list[int]]]:
    """(text, indices of its points): points with equal text chained within `merge_px`."""
    groups: list[tuple[str, list[int]]] = []
    for index, (_, _, text) in enumerate(labels):
        near = next((members for other, members in groups if other == text and any(
            math.dist(pixels[index], pixels[m]) <= merge_px for m in members)), None)
        if near is None:
            groups.append((text, [index]))
        else:
            near.append(index)
    return groups


def _try_spot(annotation: Any, spot: tuple[float, float, tuple[float, float], str, str],
              renderer: Any) -> tuple[float, float, float, float]:
    x, y, offset, horizontal, vertical = spot
    annotation.xy = (x, y)
    annotation.xyann = offset
    annotation.set_horizontalalignment(horizontal)
    annotation.set_verticalalignment(vertical)
    return tuple(annotation.get_window_extent(renderer).extents)


def _inside(box: tuple[float, float, float, float], frame: Any) -> bool:
    return (box[0] >= frame.x0 and box[1] >= frame.y0 and box[2] <= frame.x1
            and box[3] <= frame.y1)


def _overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> float:
    """The area two pixel boxes share, each grown by a pixel so that touching counts."""
    width = min(a[2], b[2]) - max(a[0], b[0]) + 2.0
    height = min(a[3], b[3]) - max(a[1], b[1]) + 2.0
    return width * height if width > 0 and height > 0 else 0.0
