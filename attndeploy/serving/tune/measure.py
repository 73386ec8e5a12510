"""Measuring one candidate: its own scratch repository, a fresh `TritonServer` on free ports and
the project's load tester at each concurrency level, lowest first.

The concurrency sweep stops early, as model analyzer's does: after a level whose p95 exceeds
the latency budget (in a closed loop more clients only queue longer), a level with errors or
wrong answers, or a level that added less than `min_level_gain` throughput over the best level
before it (the server is saturated; more clients only add latency).

A candidate the server cannot load, or whose load test cannot run, is a failed measurement
(`failure`), not an error: the search goes on without it. Only Ctrl-C passes through.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from attndeploy.errors import LoadTestError, RepositoryError, ServerError
from attndeploy.serving.loadtest import LoadTestConfig, run_load_test
from attndeploy.serving.loadtest.report import LevelResult
from attndeploy.serving.loadtest.stats import WindowStats
from attndeploy.serving.server import TritonServer, free_ports, log_tail
from attndeploy.serving.tune.scratch import materialize
from attndeploy.serving.tune.space import INT8, Candidate
from attndeploy.serving.tune.target import TuneTarget

SERVER_LOG_LINES = 3  # of a failed measurement's server log, kept in its notes

CURRENT = "current"  # roles of a measurement
PACKAGE_DEFAULT = "package_default"
SEARCH = "search"
FINAL = "final"  # a finalist measured again after the search: the choice is made on these
REPEAT = "repeat"


@dataclass(frozen=True)
class LevelPoint:
    """One concurrency level of one candidate (latencies in ms; throughput in inferences/s)."""

    concurrency: int
    throughput: float
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    avg_batch_size: float | None  # what the tuned (driven) model's batcher formed
    errors: int
    checks_done: int  # answers compared with in-process onnxruntime
    checks_failed: int
    stable: bool

    @property
    def ok(self) -> bool:
        """Measured, without errors or wrong answers."""
        return self.p95_ms is not None and not self.errors and not self.checks_failed

    def within(self, budget_ms: float | None) -> bool:
        return self.ok and (budget_ms is None or self.p95_ms <= budget_ms)  # type: ignore[operator]

    @classmethod
    def from_level(cls, level: LevelResult) -> LevelPoint:
        server = level.server or {}
        batch = server.get("avg_batch_size")
        return cls(
            concurrency=int(level.concurrency or 0),
            throughput=float(level.throughput_infer_per_s),
            p50_ms=level.latency_ms.get("p50"),  # type: ignore[arg-type]
            p95_ms=level.latency_ms.get("p95"),  # type: ignore[arg-type]
            p99_ms=level.latency_ms.get("p99"),  # type: ignore[arg-type]
            avg_batch_size=float(batch) if batch is not None else None,
            errors=level.error_count,
            checks_done=level.checks.done,
            checks_failed=level.checks.failed,
            stable=level.stable,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Measurement:
    """A candidate measured at its concurrency levels (lowest first), or why it could not be."""

    candidate: Candidate
    role: str
    levels: tuple[LevelPoint, ...] = ()
    failure: str | None = None
    stopped: str | None = None  # why the sweep ended before the last level
    duration_s: float = 0.0
    notes: tuple[str, ...] = field(default=())

    def best(self, budget_ms: float | None) -> LevelPoint | None:
        """The level of highest throughput within the budget (ties: the lower p95)."""
        kept = [p for p in self.levels if p.within(budget_ms)]
        return max(kept, key=lambda p: (p.throughput, -(p.p95_ms or 0.0)), default=None)

    def score(self, budget_ms: float | None) -> float | None:
        """The objective: the best throughput within the budget; None when no level meets it."""
        best = self.best(budget_ms)
        return best.throughput if best is not None else None

    def at(self, concurrency: int) -> LevelPoint | None:
        return next((p for p in self.levels if p.concurrency == concurrency), None)

    def to_dict(self, budget_ms: float | None = None) -> dict[str, Any]:
        best = self.best(budget_ms)
        return {
            "name": self.candidate.name,
            "role": self.role,
            "candidate": self.candidate.to_dict(),
            "levels": [p.to_dict() for p in self.levels],
            "score": self.score(budget_ms),
            "best_concurrency": best.concurrency if best is not None else None,
            "failure": self.failure,
            "stopped": self.stopped,
            "duration_s": round(self.duration_s, 2),
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class MeasureSettings:
    """How every candidate is measured: the `TuneOptions` fields of the same names (their
    defaults live there, `TuneOptions.settings` copies them)."""

    concurrency: tuple[int, ...]
    latency_budget_ms: float | None
    seq_lengths: tuple[int, ...]
    text_file: Path | None
    protocol: str
    window_s: float
    stable_windows: int
    max_windows: int
    stability_threshold: float
    warmup_requests: int
    check_fraction: float
    min_level_gain: float
    ready_timeout_s: float
    seed: int

    def load_config(self, target: TuneTarget, candidate: Candidate, url: str, concurrency: int
                    ) -> LoadTestConfig:
        level_s = self.warmup_requests * 0.5 + self.max_windows * self.window_s + 30.0
        return LoadTestConfig(
            model=target.model, url=url, protocol=self.protocol, concurrency=(concurrency,),
            seq_lengths=self.seq_lengths, text_file=self.text_file, window_s=self.window_s,
            stable_windows=self.stable_windows, max_windows=self.max_windows,
            stability_threshold=self.stability_threshold, warmup_requests=self.warmup_requests,
            check_fraction=self.check_fraction, onnx_path=target.onnx_for(candidate.precision),
            seed=self.seed, max_level_s=level_s,
        )


def sweep_stop(levels: list[LevelPoint], budget_ms: float | None, min_gain: float) -> str | None:
    """Why the concurrency sweep stops after its last level, or None to go on."""
    last = levels[-1]
    if not last.ok:
        what = f"{last.errors} error(s)" if last.errors else (
            f"{last.checks_failed} wrong answer(s)" if last.checks_failed else "no latency")
        return f"{what} at concurrency {last.concurrency}"
    if budget_ms is not None and last.p95_ms > budget_ms:  # type: ignore[operator]
        return (f"p95 {last.p95_ms:.2f} ms over the {budget_ms:g} ms budget at concurrency "
                f"{last.concurrency}")
    before = [p.throughput for p in levels[:-1] if p.ok]
    if before and last.throughput < max(before) * (1.0 + min_gain):
        return (f"throughput grew less than {min_gain:.0%} at concurrency {last.concurrency} "
                "(saturated)")
    return None


def unchecked_note(target: TuneTarget, candidate: Candidate, levels: list[LevelPoint],
                   check_fraction: float) -> tuple[str, ...]:
    """A note naming the levels whose answers the load tester did not compare with onnxruntime
    although asked to: it checks an int8 file with per-batch activation scales at concurrency 1
    only (`loadtest.run.checks_exactly`), and says why here."""
    unchecked = [str(p.concurrency) for p in levels if p.checks_done == 0]
    if check_fraction <= 0 or not unchecked:
        return ()
    why = ""
    if candidate.precision == INT8 and target.int8 is not None and target.int8.scaled_per_batch:
        why = (" (the int8 file scales activations per batch, so a batched answer differs from "
               "the request run alone; `quantize` with its default `--activations per-row` makes "
               "one that is checked at every level)")
    return (f"answers not compared with onnxruntime at concurrency {', '.join(unchecked)}{why}",)


def _server_log_tail(path: Path) -> str:
    """The end of a measurement's server log (`log_tail`: no status tables, no blank lines) on
    one line, " | " between lines (a crashed stub or server says why there; the log goes with
    the scratch folder); "" without a log."""
    if not path.is_file():
        return ""
    return " | ".join(log_tail(path, SERVER_LOG_LINES).splitlines())


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def measure_candidate(
    target: TuneTarget,
    candidate: Candidate,
    settings: MeasureSettings,
    workdir: Path,
    *,
    role: str = SEARCH,
    on_level: Callable[[LevelPoint], None] | None = None,
    on_window: Callable[[WindowStats], None] | None = None,
) -> Measurement:
    """Serve `candidate` from a scratch repository under `workdir` and load-test it;
    `on_level` gets each level's point, `on_window` each window as it closes."""
    t0 = time.monotonic()
    folder = Path(workdir) / f"{role}-{candidate.name}"
    shutil.rmtree(folder, ignore_errors=True)
    levels: list[LevelPoint] = []
    failure = stopped = None
    log_tail = ""
    try:
        repo = materialize(target, candidate, folder / "repo")
        grpc, http, metrics = free_ports(3)
        server = TritonServer(repo, grpc_port=grpc, http_port=http, metrics_port=metrics,
                              log_file=folder / "server.log",
                              ready_timeout_s=settings.ready_timeout_s)
        with server:
            url = server.http_url if settings.protocol == "http" else server.grpc_url
            for concurrency in settings.concurrency:
                config = settings.load_config(target, candidate, url, concurrency)
                report = run_load_test(config, progress=False, on_window=on_window)
                levels.append(LevelPoint.from_level(report.levels[0]))
                if on_level is not None:
                    on_level(levels[-1])
                stopped = sweep_stop(levels, settings.latency_budget_ms,
                                     settings.min_level_gain)
                if stopped is not None:
                    break
        if stopped is not None and len(levels) == len(settings.concurrency):
            stopped = None  # the last level: nothing was skipped
    except (ServerError, LoadTestError, RepositoryError) as exc:
        failure = f"{exc.stage}: {_first_line(exc)}"
        log_tail = _server_log_tail(folder / "server.log")  # read before the folder goes
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    notes: tuple[str, ...] = ()
    if failure is not None and log_tail:
        notes += (f"the server's log ended: {log_tail}",)
    notes += unchecked_note(target, candidate, levels, settings.check_fraction)
    return Measurement(candidate, role, tuple(levels), failure, stopped,
                       time.monotonic() - t0, notes)
