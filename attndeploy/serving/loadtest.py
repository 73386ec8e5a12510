"""Load test a model served by Triton over gRPC, the way perf_analyzer does, plus correctness.

`run_load_test(LoadTestConfig(...))` returns a `LoadTestReport` (see `loadreport` for its JSON
schema); the CLI only builds the config, calls it and writes the report. For each load level
(a concurrency, closed loop; or a request rate, open loop with constant or Poisson arrivals):

1. warm-up: `warmup_requests` responses that count nowhere (not even in the server's statistics,
   which are read as differences between window boundaries);
2. measurement windows of `window_s` seconds (or `window_requests` responses) until the last
   `stable_windows` agree within `stability_threshold` on throughput and p95 latency, or
   `max_windows` windows (then the level is reported unstable, which is not an error);
3. a sample (`check_fraction`) of responses is compared with in-process onnxruntime on the same
   ONNX file, after the level so that the comparison does not load the client during it.

Every wait is bounded: requests carry a gRPC deadline, each level stops after `max_level_s`, and
consecutive connection errors (or deadlines) trigger a liveness probe that turns a dead server
into a `ServerError` within a few seconds. What cannot work is refused before any load: a
sequence length above the model's `max_seq` (from the ONNX file's metadata or the served
config's `MAX_SEQ` parameter) would only fail every request. When a test stops part-way (the
server died, a level stalled, Ctrl-C), `on_partial` receives what was measured until then, as a
report marked partial, before the error propagates.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from attndeploy.errors import AttnDeployError, LoadTestError, ServerError
from attndeploy.serving.client import (
    DEFAULT_URL,
    STATUS_DEADLINE,
    STATUS_UNAVAILABLE,
    TritonRunner,
    error_message,
    error_status,
    make_inputs,
    result_outputs,
    server_error,
)
from attndeploy.serving.loadreport import CheckSummary, LevelResult, LoadTestReport
from attndeploy.serving.loadstats import (
    DISTRIBUTIONS,
    LatencySummary,
    ServerStats,
    WindowStats,
    arrival_offsets,
    compare_outputs,
    is_stable,
    relative_difference,
)

__all__ = [
    "LoadLevel",
    "LoadTestConfig",
    "LoadTestReport",
    "LevelResult",
    "parse_number_list",
    "max_seq_from_onnx",
    "run_load_test",
    "vocab_from_onnx",
]

DEFAULT_CONCURRENCY = (1, 4, 16)
DEFAULT_VOCAB = 32
FIRST_TOKEN_ID = 2  # ids 0 and 1 are reserved (padding, unknown) by the built-in tokenizer
SEQ_ORDERS = ("round_robin", "random")
PROBE_AFTER_ERRORS = 3  # consecutive connection errors / deadlines before a liveness probe
PROBE_TIMEOUT_S = 2.0
LATE_NS = 1_000_000  # request-rate mode: an issue more than 1 ms behind schedule is "delayed"
POLL_S = 0.005  # the engine looks at the clock at least this often
META_MAX_SEQ = "attndeploy.max_seq"  # an export's own limit (export --max-seq), see onnx_info
PARAM_MAX_SEQ = "MAX_SEQ"  # the python flavour's config parameter, see model_config
ABORTED = "aborted"  # stop_reason of a level that an error ended (a partial report's last)


# --------------------------------------------------------------------------- configuration


def parse_number_list(text: str, what: str, kind: type = int) -> tuple[Any, ...]:
    """"1,4,16" -> (1, 4, 16) (or floats), for CLI options; LoadTestError names `what`."""
    try:
        values = tuple(kind(part) for part in str(text).replace(" ", "").split(",") if part)
    except ValueError as exc:
        raise LoadTestError(
            f"{what} must be a comma-separated list of numbers like '1,4,16', got {text!r}."
        ) from exc
    if not values:
        raise LoadTestError(f"{what} is empty; give at least one value, e.g. '1,4,16'.")
    return values


def _as_tuple(value: Any) -> tuple[Any, ...]:
    if value is None:
        return ()
    if isinstance(value, (int, float, str)):
        return (value,)
    return tuple(value)


@dataclass(frozen=True)
class LoadLevel:
    """One load level: a concurrency (closed loop) or a request rate (open loop)."""

    mode: str  # "concurrency" | "request_rate"
    value: float
    distribution: str | None = None

    @property
    def label(self) -> str:
        if self.mode == "concurrency":
            return f"concurrency {int(self.value)}"
        return f"rate {self.value:g}/s {self.distribution}"


@dataclass(frozen=True)
class LoadTestConfig:
    """What to load, how hard and how long; validated on construction (LoadTestError).

    Give `concurrency` levels (closed loop, default 1,4,16) or `request_rates` (requests per
    second, open loop with `distribution` constant or poisson), not both. Each request carries
    `batch` rows of one length from `seq_lengths` (round-robin or random with `seed`), random
    token ids in [2, vocab) and an all-ones attention mask.
    """

    model: str
    url: str = DEFAULT_URL
    concurrency: tuple[int, ...] = ()
    request_rates: tuple[float, ...] = ()
    distribution: str = "constant"
    max_in_flight: int = 256  # request-rate mode: at most this many outstanding requests
    batch: int = 1
    seq_lengths: tuple[int, ...] = (32,)
    seq_order: str = "round_robin"
    window_s: float = 5.0
    window_requests: int | None = None  # windows of N responses instead of window_s seconds
    stability_threshold: float = 0.10
    stable_windows: int = 3
    max_windows: int = 10
    warmup_requests: int = 20
    check_fraction: float = 0.02
    onnx_path: Path | None = None  # the model's ONNX file, for the correctness checks
    atol: float = 1e-5
    rtol: float = 1e-4
    vocab_size: int | None = None  # default: from onnx_path's embedding, else 32
    pool_size: int = 64  # distinct inputs per sequence length
    seed: int = 0
    request_timeout_s: float = 10.0
    max_level_s: float = 300.0  # hard bound on one level, warm-up and drain included

    def __post_init__(self) -> None:
        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

        put("concurrency", _as_tuple(self.concurrency))
        put("request_rates", _as_tuple(self.request_rates))
        put("seq_lengths", _as_tuple(self.seq_lengths))
        if self.onnx_path is not None:
            put("onnx_path", Path(self.onnx_path))
        if self.concurrency and self.request_rates:
            raise LoadTestError(
                "Give concurrency levels or request rates, not both (they are two load modes)."
            )
        if not self.concurrency and not self.request_rates:
            put("concurrency", DEFAULT_CONCURRENCY)
        problems = self._problems()
        if problems:
            raise LoadTestError("Invalid load test configuration: " + "; ".join(problems) + ".")

    def _problems(self) -> list[str]:
        out = []
        if not self.model:
            out.append("model is empty; pass the served model's name")
        if not self.url:
            out.append("url is empty; pass host:port of the gRPC endpoint, e.g. 127.0.0.1:8001")
        if any(int(c) != c or c < 1 for c in self.concurrency):
            out.append(f"concurrency levels must be integers >= 1, got {self.concurrency}")
        if any(not r > 0 for r in self.request_rates):
            out.append(f"request rates must be > 0 per second, got {self.request_rates}")
        if self.distribution not in DISTRIBUTIONS:
            out.append(f"distribution must be one of {', '.join(DISTRIBUTIONS)}")
        if self.seq_order not in SEQ_ORDERS:
            out.append(f"seq_order must be one of {', '.join(SEQ_ORDERS)}")
        if not self.seq_lengths or any(int(s) != s or s < 1 for s in self.seq_lengths):
            out.append(f"seq_lengths must be integers >= 1, got {self.seq_lengths}")
        for name in ("batch", "max_in_flight", "stable_windows", "max_windows", "pool_size"):
            if getattr(self, name) < 1:
                out.append(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_windows < self.stable_windows:
            out.append(
                f"max_windows ({self.max_windows}) must be >= stable_windows "
                f"({self.stable_windows})"
            )
        if self.window_requests is None and not self.window_s > 0:
            out.append(f"window_s must be > 0, got {self.window_s}")
        if self.window_requests is not None and self.window_requests < 1:
            out.append(f"window_requests must be >= 1, got {self.window_requests}")
        if not 0 < self.stability_threshold < 1:
            out.append(f"stability_threshold must lie in (0, 1), got {self.stability_threshold}")
        if self.warmup_requests < 0:
            out.append(f"warmup_requests must be >= 0, got {self.warmup_requests}")
        if not 0 <= self.check_fraction <= 1:
            out.append(f"check_fraction must lie in [0, 1], got {self.check_fraction}")
        if self.onnx_path is not None and not self.onnx_path.is_file():
            out.append(f"onnx_path {self.onnx_path} is not a file")
        if self.atol < 0 or self.rtol < 0:
            out.append("atol and rtol must be >= 0")
        if self.vocab_size is not None and self.vocab_size <= FIRST_TOKEN_ID:
            out.append(f"vocab_size must be > {FIRST_TOKEN_ID}, got {self.vocab_size}")
        if not self.request_timeout_s > 0 or not self.max_level_s > 0:
            out.append("request_timeout_s and max_level_s must be > 0")
        return out

    @property
    def levels(self) -> tuple[LoadLevel, ...]:
        if self.request_rates:
            return tuple(
                LoadLevel("request_rate", float(r), self.distribution) for r in self.request_rates
            )
        return tuple(LoadLevel("concurrency", int(c)) for c in self.concurrency)

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["onnx_path"] = str(self.onnx_path) if self.onnx_path is not None else None
        return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}


# --------------------------------------------------------------------------- inputs and checks


def _load_onnx(path: Path) -> Any:
    import onnx

    return onnx.load(str(path), load_external_data=False)


def _json_metadata(model: Any) -> Iterator[dict[str, Any]]:
    """The metadata_props values that are JSON objects (attndeploy records its config so)."""
    for prop in model.metadata_props:
        try:
            value = json.loads(prop.value)
        except (json.JSONDecodeError, TypeError):
            continue
        if isinstance(value, dict):
            yield value


def vocab_from_onnx(path: Path | Any) -> int | None:
    """The vocabulary size of an exported model (a path or a loaded ModelProto), or None.

    First a `vocab_size` in a JSON value of the model's metadata_props (attndeploy records its
    model config there), else the row count of the initializer that a Gather indexes with
    `input_ids` (through Cast/Identity nodes).
    """
    model = _load_onnx(path) if isinstance(path, (str, Path)) else path
    for value in _json_metadata(model):
        if isinstance(value.get("vocab_size"), int):
            return int(value["vocab_size"])
    shapes = {init.name: tuple(init.dims) for init in model.graph.initializer}
    ids = {"input_ids"}
    for node in model.graph.node:  # nodes are topologically sorted
        if node.op_type in ("Cast", "Identity") and node.input and node.input[0] in ids:
            ids.update(node.output)
        if node.op_type == "Gather" and len(node.input) == 2 and node.input[1] in ids:
            shape = shapes.get(node.input[0])
            if shape:
                return int(shape[0])
    return None


def max_seq_from_onnx(path: Path | Any) -> int | None:
    """The longest sequence an exported model takes (a path or a loaded ModelProto), or None.

    `attndeploy.max_seq` (an export's own, possibly lower, limit), else a `max_seq` in a JSON
    value of the metadata_props (the model config); None for a file without either.
    """
    model = _load_onnx(path) if isinstance(path, (str, Path)) else path
    for prop in model.metadata_props:
        if prop.key == META_MAX_SEQ and prop.value.isdigit() and int(prop.value) > 0:
            return int(prop.value)
    for value in _json_metadata(model):
        limit = value.get("max_seq")
        if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
            return limit
    return None


def served_max_seq(model_config: dict[str, Any]) -> int | None:
    """The `MAX_SEQ` parameter of a served model's config (python flavour), or None."""
    raw = model_config.get("parameters", {}).get(PARAM_MAX_SEQ, {})
    value = str(raw.get("string_value", "")) if isinstance(raw, dict) else ""
    return int(value) if value.isdigit() and int(value) > 0 else None


def check_seq_lengths(config: LoadTestConfig, max_seq: int | None, source: str) -> None:
    """Refuse, before any load, a sequence length the model cannot take (every request would
    fail); `source` says where `max_seq` comes from."""
    if max_seq is None:
        return
    over = [int(s) for s in config.seq_lengths if s > max_seq]
    if over:
        raise LoadTestError(
            f"seq length {over[0]} exceeds the max_seq {max_seq} of model '{config.model}' "
            f"({source}): every request would fail; use lengths up to {max_seq} (--seq)."
        )


@dataclass(frozen=True)
class _PoolEntry:
    feed: dict[str, np.ndarray]  # input_ids, attention_mask: [batch, seq]
    inputs: list[Any]  # tritonclient InferInput objects built once from `feed`


def _build_pool(config: LoadTestConfig, vocab: int, dtypes: dict[str, np.dtype]) -> list[
    list[_PoolEntry]
]:
    """`pool[length_index][i]`: `pool_size` random requests for each sequence length."""
    rng = np.random.default_rng(config.seed)
    pool = []
    for seq in config.seq_lengths:
        entries = []
        for _ in range(config.pool_size):
            ids = rng.integers(FIRST_TOKEN_ID, vocab, (config.batch, int(seq)))  # [batch, seq]
            feed = {
                "input_ids": ids.astype(dtypes["input_ids"]),
                "attention_mask": np.ones_like(ids).astype(dtypes["attention_mask"]),
            }
            entries.append(_PoolEntry(feed, make_inputs(feed)))
        pool.append(entries)
    return pool


class _Reference:
    """In-process onnxruntime on the same ONNX file; expected outputs cached per pool entry."""

    def __init__(self, path: Path, served_outputs: Sequence[str]) -> None:
        import onnxruntime as ort

        self.session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.outputs = [o.name for o in self.session.get_outputs() if o.name in served_outputs]
        self._cache: dict[tuple[int, int], dict[str, np.ndarray]] = {}

    def expected(self, key: tuple[int, int], feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if key not in self._cache:
            run_feed = {n: v.astype(np.int64) for n, v in feed.items() if n in self.inputs}
            values = self.session.run(self.outputs, run_feed)
            self._cache[key] = dict(zip(self.outputs, values, strict=True))
        return self._cache[key]


# --------------------------------------------------------------------------- one load level


@dataclass
class _Tally:
    """What the main thread has drained so far (one entry per completed request)."""

    t_done: list[int] = field(default_factory=list)  # perf_counter_ns at completion
    latency: list[int] = field(default_factory=list)  # ns
    ok: list[bool] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    samples: dict[str, str] = field(default_factory=dict)
    checks: list[tuple[tuple[int, int], Any]] = field(default_factory=list)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return (np.asarray(self.t_done, dtype=np.int64), np.asarray(self.latency, dtype=np.int64),
                np.asarray(self.ok, dtype=bool))


class _LevelRun:
    """Drives one load level on an open tritonclient gRPC client; `run()` returns its result."""

    def __init__(
        self,
        client: Any,
        config: LoadTestConfig,
        level: LoadLevel,
        pool: list[list[_PoolEntry]],
        reference: _Reference | None,
        on_window: Callable[[WindowStats], None] | None = None,
    ) -> None:
        self.client, self.config, self.level, self.pool = client, config, level, pool
        self.reference = reference
        self.on_window = on_window if on_window is not None else (lambda stats: None)
        self.rng = np.random.default_rng([config.seed, int(level.value * 1000)])
        closed = level.mode == "concurrency"
        self.slots = threading.Semaphore(int(level.value) if closed else config.max_in_flight)
        self.done: deque[tuple[int, int, tuple[int, int], Any, Any]] = deque()
        self.tally = _Tally()
        self.issued = self.drained = self.drained_at_edge = 0
        self.boundaries: list[int] = []  # perf_counter_ns of window edges
        self.snapshots: list[ServerStats] = []  # server statistics at each edge
        self.windows: list[WindowStats] = []
        self.stop_reason = ""
        self.consecutive_bad = 0
        self.lags_ns: list[int] = []
        self.start_ns = self.last_activity_ns = time.perf_counter_ns()
        self.arrivals: Iterator[float] | None = None
        self.arrival_origin_ns = self.next_due_ns = 0

    # ---- issuing (main thread) and completing (gRPC threads)
    def _next_key(self) -> tuple[int, int]:
        lengths = len(self.pool)
        if self.config.seq_order == "random":
            index = int(self.rng.integers(lengths))
        else:
            index = self.issued % lengths
        return index, (self.issued // lengths) % self.config.pool_size

    def _issue(self) -> None:
        from tritonclient.utils import InferenceServerException

        key = self._next_key()
        keep = self.reference is not None and self.rng.random() < self.config.check_fraction
        done = self.done
        slots = self.slots
        t0 = time.perf_counter_ns()

        def callback(result: Any = None, error: Any = None) -> None:
            # gRPC thread: record and free the slot, nothing that can raise.
            done.append((t0, time.perf_counter_ns(), key, result if keep else None, error))
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
            if self.slots.acquire(timeout=POLL_S):
                self._issue()
            return
        if self.arrivals is None:
            self.arrivals = arrival_offsets(self.level.value, self.config.distribution, self.rng)
            self.arrival_origin_ns = now
            self.next_due_ns = now + int(next(self.arrivals) * 1e9)
        wait_ns = self.next_due_ns - now
        if wait_ns > 0:
            time.sleep(min(wait_ns / 1e9, POLL_S))
            return
        if not self.slots.acquire(timeout=POLL_S):
            return  # max_in_flight reached: the request is late, the lag will show it
        self.lags_ns.append(time.perf_counter_ns() - self.next_due_ns)
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
        return (time.perf_counter_ns() - self.start_ns) / 1e9

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
        self.start_ns = self.last_activity_ns = time.perf_counter_ns()
        hard_stop = self.start_ns + int(config.max_level_s * 1e9)
        stall_ns = int((config.request_timeout_s + 5.0) * 1e9)
        measuring = False
        while not self.stop_reason:
            now = time.perf_counter_ns()
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
                    f"request(s) in flight ({self.level.label}); the gRPC deadline should have "
                    "ended them — check the server and the network."
                )
            self._step_issue(now)
        self._wait_in_flight()
        return self._result()

    def _wait_in_flight(self) -> None:
        deadline = time.perf_counter_ns() + int((self.config.request_timeout_s + 2.0) * 1e9)
        while self.issued > self.drained and time.perf_counter_ns() < deadline:
            self._drain()
            time.sleep(POLL_S)
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


# --------------------------------------------------------------------------- the whole test


def _input_dtypes(
    runner: TritonRunner, config: LoadTestConfig, served: dict[str, Any]
) -> dict[str, np.dtype]:
    """The numpy dtypes the served model declares for input_ids and attention_mask (`served`:
    its configuration)."""
    from tritonclient.utils import triton_to_np_dtype

    metadata = runner.metadata()
    dtypes = {}
    for name in ("input_ids", "attention_mask"):
        spec = metadata.input(name)
        if spec is None:
            declared = ", ".join(s.name for s in metadata.inputs) or "none"
            raise LoadTestError(
                f"Model '{config.model}' has no input '{name}' (its inputs: {declared}); the "
                "load tester drives the model-level interface input_ids / attention_mask."
            )
        dtypes[name] = np.dtype(triton_to_np_dtype(spec.datatype))
    max_batch = int(served.get("max_batch_size", 0))
    if max_batch > 0 and config.batch > max_batch:
        raise LoadTestError(
            f"batch {config.batch} exceeds the max_batch_size {max_batch} of model "
            f"'{config.model}'; lower --batch."
        )
    return dtypes


class _Progress:
    """A rich progress bar on stderr, one task per level (silent when disabled)."""

    def __init__(self, enabled: bool, total_windows: int) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self.total = total_windows
        self.bar = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            console=Console(stderr=True), disable=not enabled,
        )
        self.task: Any = None

    def __enter__(self) -> _Progress:
        self.bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.__exit__(None, None, None)

    def start(self, level: LoadLevel) -> None:
        self.task = self.bar.add_task(level.label, total=self.total, info="warm-up")

    def window(self, stats: WindowStats) -> None:
        p95 = f"{stats.p95_ms:.2f} ms" if stats.p95_ms is not None else "-"
        self.bar.update(self.task, advance=1,
                        info=f"{stats.throughput_rps:.0f} req/s, p95 {p95}")

    def finish(self, result: LevelResult) -> None:
        self.bar.update(self.task, completed=self.total,
                        info=f"{result.throughput_infer_per_s:.0f} infer/s ({result.stop_reason})")


def run_load_test(
    config: LoadTestConfig,
    *,
    progress: bool = True,
    on_partial: Callable[[LoadTestReport], None] | None = None,
) -> LoadTestReport:
    """Run every load level of `config` against the server; return the report (never exits).

    Raises ServerError when no server answers, the model is missing or the server dies during
    the test; LoadTestError when the model does not have the expected interface, a sequence
    length exceeds its max_seq (both before any load) or a level cannot run. A model that
    answers with errors or wrong outputs is a failed report, not an exception: check
    `report.passed` (or call `report.raise_if_failed()`).

    When an error (or Ctrl-C) ends the test once load has begun, `on_partial` is called with the
    levels measured so far, the interrupted one last, in a report marked partial with the
    reason; then the error propagates.
    """
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t_start = time.perf_counter()
    notes: list[str] = []
    vocab = config.vocab_size
    if config.onnx_path is not None:
        onnx_model = _load_onnx(config.onnx_path)
        check_seq_lengths(config, max_seq_from_onnx(onnx_model), f"from {config.onnx_path}")
        if vocab is None:
            vocab = vocab_from_onnx(onnx_model)
        del onnx_model
    if vocab is None:
        vocab = DEFAULT_VOCAB
        notes.append(f"token ids drawn from [{FIRST_TOKEN_ID}, {vocab}): no vocab_size given")
    results: list[LevelResult] = []

    def report(partial_reason: str | None = None) -> LoadTestReport:
        return LoadTestReport(
            url=config.url,
            model=config.model,
            started_at=started_at,
            duration_s=time.perf_counter() - t_start,
            config=config.to_dict(),
            levels=list(results),
            notes=notes,
            partial_reason=partial_reason,
        )

    probe_timeout = min(config.request_timeout_s, 5.0)
    with TritonRunner(config.url, config.model, timeout_s=probe_timeout) as runner:
        served = runner.model_config()
        dtypes = _input_dtypes(runner, config, served)
        check_seq_lengths(config, served_max_seq(served),
                          f"the served config's {PARAM_MAX_SEQ} parameter")
        reference = None
        if config.onnx_path is not None and config.check_fraction > 0:
            served_outputs = [spec.name for spec in runner.metadata().outputs]
            reference = _Reference(config.onnx_path, served_outputs)
            if not reference.outputs:
                notes.append("no output of the ONNX file is served: correctness not checked")
                reference = None
        elif config.check_fraction > 0:
            notes.append("no onnx_path given: responses were not checked against onnxruntime")
        pool = _build_pool(config, vocab, dtypes)
        with _Progress(progress, config.max_windows) as bar:
            for level in config.levels:
                bar.start(level)
                run = _LevelRun(runner.client, config, level, pool, reference, bar.window)
                try:
                    result = run.run()
                except (AttnDeployError, KeyboardInterrupt) as exc:
                    if on_partial is not None:
                        results.append(run.partial_result())
                        reason = str(exc) if isinstance(exc, AttnDeployError) else "interrupted"
                        on_partial(report(reason))
                    raise
                bar.finish(result)
                results.append(result)
                if result.stop_reason == "all_failed":
                    skipped = [lv.label for lv in config.levels[len(results):]]
                    if skipped:
                        notes.append(f"every request failed; skipped {', '.join(skipped)}")
                    break
    return report()
