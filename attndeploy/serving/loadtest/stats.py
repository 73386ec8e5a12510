"""The arithmetic of a load test, free of any server: percentiles, the stability rule, differences
of Triton's statistics between two snapshots, arrival schedules and the output comparison.

Conventions follow perf_analyzer (see "Load tests: conventions of the field" in
docs/architecture.md) and the comparison rule of Polygraphy (see "Validation: what parity means
here").
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

PERCENTILES = (50, 90, 95, 99)
DISTRIBUTIONS = ("constant", "poisson")


# --------------------------------------------------------------------------- latencies


def percentile(sorted_values: Sequence[float] | np.ndarray, p: float) -> float:
    """Nearest-rank percentile: the ceil(p/100 * n)-th smallest value (p in (0, 100]).

    `sorted_values` must be sorted ascending and non-empty. Like perf_analyzer, a reported p95 is
    always a latency that some request really had (no interpolation).
    """
    n = len(sorted_values)
    if n == 0:
        raise ValueError("percentile of no values")
    rank = max(1, math.ceil(p / 100.0 * n))
    return float(sorted_values[min(rank, n) - 1])


@dataclass(frozen=True)
class LatencySummary:
    """Latency statistics in milliseconds over `count` requests (all None when count is 0)."""

    count: int
    avg: float | None
    min: float | None
    p50: float | None
    p90: float | None
    p95: float | None
    p99: float | None
    max: float | None

    @classmethod
    def from_ns(cls, latencies_ns: Sequence[int] | np.ndarray) -> LatencySummary:
        values = np.sort(np.asarray(latencies_ns, dtype=np.float64)) / 1e6  # [n] ms
        if values.size == 0:
            return cls(0, None, None, None, None, None, None, None)
        p50, p90, p95, p99 = (percentile(values, p) for p in PERCENTILES)
        return cls(
            count=int(values.size),
            avg=float(values.mean()),
            min=float(values[0]),
            p50=p50,
            p90=p90,
            p95=p95,
            p99=p99,
            max=float(values[-1]),
        )


# --------------------------------------------------------------------------- stability


@dataclass(frozen=True)
class WindowStats:
    """One measurement window as the client saw it (requests counted by completion time)."""

    index: int
    duration_s: float
    requests: int  # successful responses completed in the window
    errors: int  # failed responses completed in the window
    throughput_rps: float  # successful requests per second
    p50_ms: float | None
    p95_ms: float | None


def within(values: Sequence[float], threshold: float) -> bool:
    """perf_analyzer's rule: max/avg - 1 and 1 - min/avg both at most `threshold`."""
    if not values:
        return False
    avg = sum(values) / len(values)
    if avg <= 0:
        return False
    return max(values) / avg - 1.0 <= threshold and 1.0 - min(values) / avg <= threshold


def is_stable(windows: Sequence[WindowStats], needed: int, threshold: float) -> bool:
    """Whether the last `needed` windows agree within `threshold` on throughput AND p95 latency."""
    if len(windows) < needed:
        return False
    last = windows[-needed:]
    p95s = [w.p95_ms for w in last]
    if any(w.requests == 0 for w in last) or any(p is None for p in p95s):
        return False
    return within([w.throughput_rps for w in last], threshold) and within(
        [float(p) for p in p95s if p is not None], threshold
    )


# --------------------------------------------------------------------------- server statistics

_DURATIONS = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output")


def _count_ns(entry: Mapping[str, Any] | None) -> tuple[int, int]:
    """(count, ns) of a `{count, ns}` statistics entry; Triton writes strings and `{}` for none."""
    entry = entry or {}
    return int(entry.get("count", 0)), int(entry.get("ns", 0))


@dataclass(frozen=True)
class ServerStats:
    """Cumulative statistics of one model (summed over its versions) at one moment.

    `inference_count` counts batch rows, `execution_count` model executions; `counts[k]` and
    `ns[k]` are the request counts and total nanoseconds of each duration kind in `_DURATIONS`.
    """

    inference_count: int
    execution_count: int
    counts: Mapping[str, int]
    ns: Mapping[str, int]

    @classmethod
    def from_json(cls, stats: Mapping[str, Any], model: str) -> ServerStats:
        """Parse `get_inference_statistics(model, as_json=True)` (raises KeyError if absent)."""
        entries = [m for m in stats.get("model_stats", []) if m.get("name") == model]
        if not entries:
            raise KeyError(model)
        counts = dict.fromkeys(_DURATIONS, 0)
        ns = dict.fromkeys(_DURATIONS, 0)
        inference = execution = 0
        for entry in entries:
            inference += int(entry.get("inference_count", 0))
            execution += int(entry.get("execution_count", 0))
            for kind in _DURATIONS:
                count, total = _count_ns(entry.get("inference_stats", {}).get(kind))
                counts[kind] += count
                ns[kind] += total
        return cls(inference, execution, counts, ns)

    def minus(self, earlier: ServerStats) -> ServerStatsDelta:
        """What happened between `earlier` and this snapshot."""
        return ServerStatsDelta(
            inference_count=self.inference_count - earlier.inference_count,
            execution_count=self.execution_count - earlier.execution_count,
            counts={k: self.counts[k] - earlier.counts[k] for k in _DURATIONS},
            ns={k: self.ns[k] - earlier.ns[k] for k in _DURATIONS},
        )


@dataclass(frozen=True)
class ServerStatsDelta:
    """The server's own account of a span of time (differences of two `ServerStats`)."""

    inference_count: int
    execution_count: int
    counts: Mapping[str, int]
    ns: Mapping[str, int]

    @property
    def request_count(self) -> int:
        """Requests the server finished (its errors included: a python-backend model's error
        responses count as success on the server side)."""
        return self.counts["success"] + self.counts["fail"]

    def avg_us(self, kind: str) -> float | None:
        """Average microseconds per request spent in `kind` (queue, compute_infer, ...)."""
        count = self.counts[kind]
        return self.ns[kind] / count / 1e3 if count > 0 else None

    @property
    def avg_batch_size(self) -> float | None:
        """Rows per model execution: the batch size the dynamic batcher formed."""
        if self.execution_count <= 0:
            return None
        return self.inference_count / self.execution_count


def relative_difference(a: float, b: float) -> float | None:
    """|a - b| / |b| (None when b is 0)."""
    return abs(a - b) / abs(b) if b else None


# --------------------------------------------------------------------------- arrivals


def arrival_offsets(rate: float, distribution: str, rng: np.random.Generator) -> Iterator[float]:
    """Issue times in seconds after the start, for `rate` requests per second (endless).

    "constant": every 1/rate s; "poisson": exponential inter-arrival gaps of mean 1/rate s.
    """
    if rate <= 0:
        raise ValueError(f"rate must be positive, got {rate}")
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"distribution must be one of {DISTRIBUTIONS}, got {distribution!r}")
    gap = 1.0 / rate
    t = 0.0
    while True:
        for step in (rng.exponential(gap, 1024) if distribution == "poisson" else [gap] * 1024):
            t += float(step)
            yield t


# --------------------------------------------------------------------------- output comparison


@dataclass(frozen=True)
class OutputCheck:
    """One response compared with the reference: `passed`, worst error, why it failed."""

    passed: bool
    max_abs_error: float
    mismatched_gates: int
    reason: str = ""


def compare_outputs(
    actual: Mapping[str, np.ndarray],
    expected: Mapping[str, np.ndarray],
    *,
    atol: float,
    rtol: float,
) -> OutputCheck:
    """Compare every expected output (Polygraphy rule for floats, equality for the rest).

    A float element fails only if |a - b| > atol AND |a - b| > rtol * |b|; boolean and integer
    outputs (GA-Net `gates`) must be equal; a missing output or another shape fails.
    """
    worst, gate_flips, reasons = 0.0, 0, []
    for name, reference in expected.items():
        if name not in actual:
            reasons.append(f"output '{name}' is missing")
            continue
        value = np.asarray(actual[name])
        if value.shape != reference.shape:
            reasons.append(f"'{name}' has shape {value.shape}, expected {reference.shape}")
            continue
        if not np.issubdtype(reference.dtype, np.floating):
            flips = int(np.count_nonzero(value != reference))
            gate_flips += flips
            if flips:
                reasons.append(f"'{name}' differs in {flips} element(s)")
            continue
        diff = np.abs(value.astype(np.float64) - reference.astype(np.float64))
        finite = np.isfinite(diff)
        if not finite.all():
            reasons.append(f"'{name}' has NaN/Inf where the reference differs")
        if diff.size:
            worst = max(worst, float(np.max(np.where(finite, diff, 0.0))))
        bad = (diff > atol) & (diff > rtol * np.abs(reference.astype(np.float64)))
        if np.count_nonzero(bad):
            reasons.append(
                f"'{name}': {int(np.count_nonzero(bad))} element(s) beyond atol {atol:g} and "
                f"rtol {rtol:g} (max |a-b| {float(diff.max()):.3g})"
            )
    return OutputCheck(not reasons, worst, gate_flips, "; ".join(reasons))
