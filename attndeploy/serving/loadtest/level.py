"""One load level: `_LevelRun` issues requests, drains responses, closes windows, sums up."""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from attndeploy.errors import LoadTestError, ServerError
from attndeploy.serving.client.triton import (
    STATUS_DEADLINE,
    STATUS_UNAVAILABLE,
    error_message,
    error_status,
    result_outputs,
    server_error,
)
from attndeploy.serving.loadtest.clock import REAL_CLOCK, Clock
from attndeploy.serving.loadtest.config import LoadLevel, LoadTestConfig
from attndeploy.serving.loadtest.inputs import _PoolEntry, _Reference
from attndeploy.serving.loadtest.report import CheckSummary, LevelResult
from attndeploy.serving.loadtest.stats import (
    LatencySummary,
    ServerStats,
    WindowStats,
    arrival_offsets,
    compare_outputs,
    is_stable,
    relative_difference,
)

PROBE_AFTER_ERRORS = 3  # consecutive connection errors / deadlines before a liveness probe
PROBE_TIMEOUT_S = 2.0
LATE_NS = 1_000_000  # request-rate mode: an issue more than 1 ms behind schedule is "delayed"
POLL_S = 0.005  # the engine looks at the clock at least this often
ABORTED = "aborted"  # stop_reason of a level that an error ended (a partial report's last)


def level_rng(seed: int, level: LoadLevel) -> np.random.Generator:
    """The random stream of one level: its arrivals, random seq order and checked sample."""
    return np.random.default_rng([seed, int(level.value * 1000)])


@dataclass
class _Tally:
    """What the main thread has drained so far (one entry per completed request)."""

    t_done: list[int] = field(default_factory=list)  # the clock's ns at completion
    latency: list[int] = field(default_factory=list)  # ns
    ok: list[bool] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    samples: dict[str, str] = field(default_factory=dict)
    checks: list[tuple[tuple[int, int], Any]] = field(default_factory=list)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return (np.asarray(self.t_done, dtype=np.int64), np.asarray(self.latency, dtype=np.int64),
                np.asarray(self.ok, dtype=bool))


class _LevelRun:
    """Drives one load level on an open client (tritonclient gRPC, or `client.HttpClient` with
    the same calls); `run()` returns its result. Every time reading and wait goes through
    `clock` (the real one unless a test gives a simulated one)."""

    def __init__(
        self,
        client: Any,
        config: LoadTestConfig,
        level: LoadLevel,
        pool: list[list[_PoolEntry]],
        reference: _Reference | None,
        on_window: Callable[[WindowStats], None] | None = None,
        clock: Clock = REAL_CLOCK,
    ) -> None:
        self.client, self.config, self.level, self.pool = client, config, level, pool
        self.clock = clock
        self.reference = reference
        self.on_window = on_window if on_window is not None else (lambda stats: None)
        self.rng = level_rng(config.seed, level)
        closed = level.mode == "concurrency"
        self.slots = threading.Semaphore(int(level.value) if closed else config.max_in_flight)
        self.done: deque[tuple[int, int, tuple[int, int], Any, Any]] = deque()
        self.tally = _Tally()
        self.issued = self.drained = self.drained_at_edge = 0
        self.boundaries: list[int] = []  # the clock's ns at window edges
        self.snapshots: list[ServerStats] = []  # server statistics at each edge
        self.windows: list[WindowStats] = []
        self.stop_reason = ""
        self.consecutive_bad = 0
        self.lags_ns: list[int] = []
        self.start_ns = self.last_activity_ns = clock.now_ns()
        self.arrivals: Iterator[float] | None = None
        self.arrival_origin_ns = self.next_due_ns = 0

    # ---- issuing (main thread) and completing (gRPC threads)
    def _next_key(self) -> tuple[int, int]:
        lengths = len(self.pool)
        if self.config.seq_order == "random":
            index = int(self.rng.integers(lengths))
        else:
            index = self.issued % lengths
        return index, (self.issued // lengths) % len(self.pool[index])

    def _issue(self) -> None:
        from tritonclient.utils import InferenceServerException

        key = self._next_key()
        keep = self.reference is not None and self.rng.random() < self.config.check_fraction
        done = self.done
        slots = self.slots
        now_ns = self.clock.now_ns
        t0 = now_ns()

        def callback(result: Any = None, error: Any = None) -> None:
            # gRPC thread: record and free the slot, nothing that can raise.
            done.append((t0, now_ns(), key, result if keep else None, error))
            slots.release()

        self.issued += 1
        self.last_activity_ns = t0
        try:
            self.client.async_infer(
                self.config.model,
                self.pool[key[0]][key[1]].inputs,
                callback,
                client_timeout=self.config.request_timeout_s,
            )
        except InferenceServerException as exc:
            callback(None, exc)

    def _step_issue(self, now: int) -> None:
        if self.level.mode == "concurrency":
            if self.clock.acquire(self.slots, POLL_S):
                self._issue()
            return
        if self.arrivals is None:
            # the level's own distribution: the one its label and result name
            distribution = self.level.distribution or self.config.distribution
            self.arrivals = arrival_offsets(self.level.value, distribution, self.rng)
            self.arrival_origin_ns = now
            self.next_due_ns = now + int(next(self.arrivals) * 1e9)
        wait_ns = self.next_due_ns - now
        if wait_ns > 0:
            self.clock.sleep(min(wait_ns / 1e9, POLL_S))
            return
        if not self.clock.acquire(self.slots, POLL_S):
            return  # max_in_flight reached: the request is late, the lag will show it
        self.lags_ns.append(self.clock.now_ns() - self.next_due_ns)
        self._issue()
        self.next_due_ns = self.arrival_origin_ns + int(next(self.arrivals) * 1e9)

    # ---- draining (main thread)
    def _drain(self) -> None:
        tally = self.tally
        while self.done:
            t0, t1, key, result, error = self.done.popleft()
            self.drained += 1
            self.last_activity_ns = max(self.last_activity_ns, t1)
            tally.t_done.append(t1)
            tally.latency.append(t1 - t0)
            tally.ok.append(error is None)
            if error is None:
                self.consecutive_bad = 0
                if result is not None:
                    tally.checks.append((key, result))
                continue
            status = error_status(error)
            tally.errors[status] += 1
            tally.samples.setdefault(status, error_message(error))
            if status in (STATUS_UNAVAILABLE, STATUS_DEADLINE):
                self.consecutive_bad += 1
                if self.consecutive_bad >= PROBE_AFTER_ERRORS:
                    self._probe(error)

    def _elapsed_s(self) -> float:
        return (self.clock.now_ns() - self.start_ns) / 1e9

    def _died(self, detail: str) -> ServerError:
        return ServerError(
            f"The Triton server at {self.config.url} stopped answering during the load test "
            f"({self.level.label}, {self._elapsed_s():.1f} s into the level): {detail}"
        )

    def _probe(self, error: Any) -> None:
        """After consecutive connection errors: a dead server ends the test, a live one not."""
        from tritonclient.utils import InferenceServerException

        try:
            live = self.client.is_server_live(client_timeout=PROBE_TIMEOUT_S)
        except InferenceServerException as exc:
            raise self._died(error_message(exc)) from exc
        if not live:
            raise self._died(f"the server reports it is not live ({error_message(error)})")
        self.consecutive_bad = 0

    def _server_stats(self) -> ServerStats:
        from tritonclient.utils import InferenceServerException

        try:
            raw = self.client.get_inference_statistics(
                self.config.model, as_json=True, client_timeout=self.config.request_timeout_s
            )
        except InferenceServerException as exc:
            if error_status(exc) in (STATUS_UNAVAILABLE, STATUS_DEADLINE):
                raise self._died(error_message(exc)) from exc
            raise server_error(exc, self.config.url, self.config.model, "the statistics request",
                               self.config.request_timeout_s) from exc
        try:
            return ServerStats.from_json(raw, self.config.model)
        except (KeyError, TypeError, ValueError) as exc:
            raise LoadTestError(
                f"The server's statistics have no usable entry for model '{self.config.model}' "
                f"({exc!r})."
            ) from exc

    # ---- windows
    def _window_due(self, now: int) -> bool:
        if self.config.window_requests is not None:
            return self.drained - self.drained_at_edge >= self.config.window_requests
        return now - self.boundaries[-1] >= int(self.config.window_s * 1e9)

    def _open_window(self, now: int) -> None:
        self.boundaries.append(now)
        self.snapshots.append(self._server_stats())
        self.drained_at_edge = self.drained

    def _close_window(self, now: int) -> WindowStats:
        self.boundaries.append(now)
        self.drained_at_edge = self.drained
        self.snapshots.append(self._server_stats())
        t_done, latency, ok = self.tally.arrays()
        inside = (t_done >= self.boundaries[-2]) & (t_done < now)
        good = inside & ok
        duration = (now - self.boundaries[-2]) / 1e9
        summary = LatencySummary.from_ns(latency[good])
        stats = WindowStats(
            index=len(self.windows),
            duration_s=duration,
            requests=int(good.sum()),
            errors=int((inside & ~ok).sum()),
            throughput_rps=float(good.sum()) / duration if duration > 0 else 0.0,
            p50_ms=summary.p50,
            p95_ms=summary.p95,
        )
        self.windows.append(stats)
        self.on_window(stats)
        return stats

    def _stop_after(self, stats: WindowStats) -> str:
        if stats.requests == 0 and stats.errors > 0:
            return "all_failed"
        if is_stable(self.windows, self.config.stable_windows, self.config.stability_threshold):
            return "stable"
        if len(self.windows) >= self.config.max_windows:
            return "max_windows"
        return ""

    # ---- the loop
    def run(self) -> LevelResult:
        config = self.config
        self.start_ns = self.last_activity_ns = self.clock.now_ns()
        hard_stop = self.start_ns + int(config.max_level_s * 1e9)
        stall_ns = int((config.request_timeout_s + 5.0) * 1e9)
        measuring = False
        while not self.stop_reason:
            now = self.clock.now_ns()
            self._drain()
            if not measuring and self.drained >= config.warmup_requests:
                measuring = True
                self._open_window(now)
            elif measuring and self._window_due(now):
                self.stop_reason = self._stop_after(self._close_window(now))
                continue
            if now >= hard_stop:
                if measuring and not self.windows and self.drained > 0:
                    self._close_window(now)  # keep the partial window: better than nothing
                self.stop_reason = "time_limit"
                break
            if self.issued > self.drained and now - self.last_activity_ns > stall_ns:
                raise LoadTestError(
                    f"No response for {stall_ns / 1e9:.0f} s with {self.issued - self.drained} "
                    f"request(s) in flight ({self.level.label}); the request deadline should have "
                    "ended them — check the server and the network."
                )
            self._step_issue(now)
        self._wait_in_flight()
        return self._result()

    def _wait_in_flight(self) -> None:
        deadline = self.clock.now_ns() + int((self.config.request_timeout_s + 2.0) * 1e9)
        while self.issued > self.drained and self.clock.now_ns() < deadline:
            self._drain()
            self.clock.sleep(POLL_S)
        self._drain()

    def partial_result(self) -> LevelResult:
        """What this level measured before an error ended it (stop_reason "aborted").

        Responses still in flight are not waited for (the server may be gone). A window whose
        closing statistics request failed is dropped: its server numbers do not exist.
        """
        del self.boundaries[len(self.snapshots):]
        self.stop_reason = ABORTED
        return self._result()

    # ---- the result
    def _checks(self) -> CheckSummary:
        if self.reference is None or not self.tally.checks:
            return CheckSummary()
        done = failed = flips = 0
        worst: float = 0.0
        first = ""
        for key, result in self.tally.checks:
            entry = self.pool[key[0]][key[1]]
            check = compare_outputs(
                result_outputs(result),
                self.reference.expected(key, entry.feed),
                atol=self.config.atol,
                rtol=self.config.rtol,
            )
            done += 1
            worst = max(worst, check.max_abs_error)
            flips += check.mismatched_gates
            if not check.passed:
                failed += 1
                first = first or check.reason
        return CheckSummary(done, failed, worst, flips, first)

    def _result(self) -> LevelResult:
        config, level = self.config, self.level
        k = min(config.stable_windows, len(self.windows))
        t_done, latency, ok = self.tally.arrays()
        server: dict[str, float | int | None] | None = None
        count_rel_diff = None
        if k:
            start, end = self.boundaries[-k - 1], self.boundaries[-1]
            inside = (t_done >= start) & (t_done < end)
            measured_s = (end - start) / 1e9
            delta = self.snapshots[-1].minus(self.snapshots[-k - 1])
            client_rows = int(inside.sum()) * config.batch
            server = {
                "request_count": delta.request_count,
                "inference_count": delta.inference_count,
                "execution_count": delta.execution_count,
                "avg_batch_size": delta.avg_batch_size,
                "queue_us": delta.avg_us("queue"),
                "compute_input_us": delta.avg_us("compute_input"),
                "compute_infer_us": delta.avg_us("compute_infer"),
                "compute_output_us": delta.avg_us("compute_output"),
                "request_us": delta.avg_us("success"),
            }
            count_rel_diff = relative_difference(delta.inference_count, client_rows)
        else:
            inside, measured_s, client_rows = np.zeros_like(ok), 0.0, 0
        good = inside & ok
        requests = int(good.sum())
        rps = requests / measured_s if measured_s > 0 else 0.0
        lags = np.asarray(self.lags_ns, dtype=np.int64)
        return LevelResult(
            label=level.label,
            mode=level.mode,
            concurrency=int(level.value) if level.mode == "concurrency" else None,
            request_rate=level.value if level.mode == "request_rate" else None,
            distribution=level.distribution,
            batch=config.batch,
            seq_lengths=[int(s) for s in config.seq_lengths],
            stable=self.stop_reason == "stable",
            stop_reason=self.stop_reason,
            windows=[
                {**asdict(w), "measured": w.index >= len(self.windows) - k} for w in self.windows
            ],
            measured_windows=k,
            measured_s=measured_s,
            request_count=requests,
            throughput_infer_per_s=rps * config.batch,
            throughput_requests_per_s=rps,
            latency_ms=asdict(LatencySummary.from_ns(latency[good])),
            error_count=int(sum(self.tally.errors.values())),
            errors=dict(self.tally.errors),
            error_samples=dict(self.tally.samples),
            server=server,
            client_inference_count=client_rows,
            count_rel_diff=count_rel_diff,
            checks=self._checks(),
            delayed_requests=int((lags > LATE_NS).sum()),
            max_schedule_lag_ms=float(lags.max()) / 1e6 if lags.size else 0.0,
            warmup_requests=min(config.warmup_requests, self.drained),
            duration_s=self._elapsed_s(),
        )
