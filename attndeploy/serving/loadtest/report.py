"""The result of a load test as data: `LevelResult` per load level, `LoadTestReport` for the run,
written as JSON, CSV (one row per level) and a PNG latency-throughput curve.

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
import json
import math
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
        """PNG: p50 and p95 latency against throughput, one point per level, labelled."""
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        figure = Figure(figsize=(7, 4.5), dpi=110)
        FigureCanvasAgg(figure)
        axes = figure.add_subplot(1, 1, 1)
        points = [lv for lv in self.levels if lv.latency_ms.get("p50") is not None]
        x = [lv.throughput_infer_per_s for lv in points]
        for key, style in (("p50", "o-"), ("p95", "s--")):
            axes.plot(x, [lv.latency_ms[key] for lv in points], style, label=f"{key} latency")
        for level, xi in zip(points, x, strict=True):
            axes.annotate(level.label, (xi, level.latency_ms["p95"] or 0.0), fontsize=8,
                          textcoords="offset points", xytext=(4, 6))
        axes.set_xlabel("throughput (infer/s)")
        axes.set_ylabel("latency (ms)")
        axes.set_title(f"{self.model} @ {self.url}")
        axes.grid(True, alpha=0.3)
        if points:
            axes.legend()
        return atomic_write_png(figure, path)

    def write_all(self, directory: Path, stem: str = "loadtest") -> dict[str, Path]:
        """`<stem>.json`, `<stem>.csv` and `<stem>.png` in `directory`; returns them by kind."""
        directory = Path(directory)
        return {
            "json": self.write_json(directory / f"{stem}.json"),
            "csv": self.write_csv(directory / f"{stem}.csv"),
            "png": self.write_plot(directory / f"{stem}.png"),
        }
