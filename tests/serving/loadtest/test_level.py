"""One load level in simulated time: windows, concurrency, request rates, errors and limits."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from attndeploy.errors import LoadTestError, ServerError
from attndeploy.serving.loadtest import (
    POLL_S,
    PROBE_AFTER_ERRORS,
    LoadLevel,
    LoadTestConfig,
    _build_pool,
    _LevelRun,
    level_rng,
)
from attndeploy.serving.loadtest.stats import arrival_offsets
from tests.serving.loadtest_sim import SimClient, SimClock


def _sim_level(client: SimClient, level: LoadLevel, **overrides: Any) -> _LevelRun:
    """A level run on the simulated clock of `client` (no real time passes)."""
    config = LoadTestConfig(**{
        "model": "m", "window_requests": 40, "warmup_requests": 5, "max_windows": 5,
        "stable_windows": 2, "stability_threshold": 0.5, "check_fraction": 0.0,
        "pool_size": 2, "seq_lengths": (4, 8), **overrides,
    })
    pool = _build_pool(config, 10, {"input_ids": np.dtype(np.int64),
                                    "attention_mask": np.dtype(np.int64)})
    return _LevelRun(client, config, level, pool, reference=None, clock=client.clock)


def test_a_closed_loop_level_measures_windows_and_agrees_with_the_server() -> None:
    client = SimClient(SimClock(), latency_s=0.001)
    result = _sim_level(client, LoadLevel("concurrency", 2)).run()
    assert result.error_count == 0 and result.measured_windows >= 2
    assert result.stop_reason == "stable"  # a fixed-latency server: every window agrees
    assert result.request_count >= 80 and len(client.issued_ns) == client.served
    assert result.latency_ms["p50"] == result.latency_ms["max"] == 1.0  # exactly the latency
    assert result.server is not None and result.server["avg_batch_size"] == 1.0
    assert result.count_rel_diff is not None and result.count_rel_diff <= 0.05


@pytest.mark.parametrize("concurrency", [1, 4, 16])
def test_a_closed_loop_measures_concurrency_over_latency(concurrency: int) -> None:
    """Against a server of fixed latency, c requests in flight complete c per latency: the
    throughput a closed loop reports grows with the concurrency by construction."""
    client = SimClient(SimClock(), latency_s=0.010)
    result = _sim_level(client, LoadLevel("concurrency", concurrency), window_requests=None,
                        window_s=1.0, max_windows=2, stable_windows=2).run()
    assert result.throughput_requests_per_s == pytest.approx(concurrency / 0.010, rel=0.02)
    assert result.latency_ms["p99"] == 10.0
    assert _most_in_flight(client) == concurrency  # never more than c outstanding


def _most_in_flight(client: SimClient) -> int:
    """The most requests outstanding at once (each is answered exactly latency_ns after)."""
    sent = np.asarray(client.issued_ns)
    return int(max(((sent > t - client.latency_ns) & (sent <= t)).sum() for t in sent))


def _rate_level(client: SimClient, rate: float, distribution: str, **overrides: Any) -> _LevelRun:
    return _sim_level(client, LoadLevel("request_rate", rate, distribution),
                      **{"window_requests": None, "window_s": 0.5, "max_windows": 2,
                         "stable_windows": 2, "warmup_requests": 0, **overrides})


def test_a_constant_request_rate_issues_on_schedule_and_measures_the_rate() -> None:
    client = SimClient(SimClock(), latency_s=0.001)
    result = _rate_level(client, 200.0, "constant").run()
    assert result.mode == "request_rate" and result.request_rate == 200.0
    gaps = np.diff(client.issued_ns)
    assert gaps.min() >= 4_999_999 and gaps.max() <= 5_000_001  # every 5 ms, to the ns
    assert result.delayed_requests == 0 and result.max_schedule_lag_ms == 0.0
    assert result.measured_s == pytest.approx(1.0, abs=0.01)
    assert result.throughput_requests_per_s == pytest.approx(200.0, rel=0.02)


def test_poisson_arrivals_are_issued_at_the_seeded_schedule() -> None:
    client = SimClient(SimClock(), latency_s=0.001)
    level = LoadLevel("request_rate", 400.0, "poisson")
    result = _rate_level(client, 400.0, "poisson", window_s=1.0, seed=7).run()
    offsets = arrival_offsets(400.0, "poisson", level_rng(7, level))
    expected = np.array([int(next(offsets) * 1e9) for _ in client.issued_ns])
    sent = np.asarray(client.issued_ns)
    assert len(sent) > 500 and result.error_count == 0
    assert np.array_equal(sent - sent[0], expected - expected[0])  # each arrival on time
    assert result.delayed_requests == 0
    # The schedule itself is Poisson: mean gap 1/rate, exponential gaps (CV = 1); checked on
    # the seeded schedule, so the numbers are the same on every machine.
    gaps = np.diff(sent) / 1e9
    assert gaps.mean() == pytest.approx(1 / 400.0, rel=0.1)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.1)


def test_request_rate_mode_holds_at_most_max_in_flight_and_reports_the_lag() -> None:
    client = SimClient(SimClock(), latency_s=0.050)  # 50 ms each: 8 in flight serve 160/s
    result = _rate_level(client, 1000.0, "constant", max_in_flight=8,
                         warmup_requests=8).run()  # the warm-up fills the 8 slots
    assert _most_in_flight(client) == 8
    assert result.throughput_requests_per_s == pytest.approx(8 / 0.050, rel=0.01)
    assert result.delayed_requests > 0 and result.max_schedule_lag_ms > 100


def test_errors_are_counted_by_status_and_stop_the_level() -> None:
    client = SimClient(SimClock(), fail_with="StatusCode.INTERNAL")
    result = _sim_level(client, LoadLevel("concurrency", 2)).run()
    assert result.stop_reason == "all_failed"
    assert result.errors["StatusCode.INTERNAL"] == result.error_count > 0
    assert result.error_samples["StatusCode.INTERNAL"] == "bad"


def test_a_server_that_dies_mid_level_is_a_server_error_after_a_few_refusals() -> None:
    client = SimClient(SimClock(), dead_after=30)
    with pytest.raises(ServerError, match="stopped answering during the load test"):
        _sim_level(client, LoadLevel("concurrency", 2), window_requests=10_000).run()
    # Two in flight: the third refusal in a row triggers the probe that finds the server dead.
    assert len(client.issued_ns) <= 30 + PROBE_AFTER_ERRORS + 2
    assert client.clock.now_ns() < 1e8  # 0.1 s of simulated time: no waiting on a dead server


def test_a_level_that_cannot_finish_stops_at_the_time_limit() -> None:
    client = SimClient(SimClock(), latency_s=0.01)
    result = _sim_level(client, LoadLevel("concurrency", 1), window_requests=10_000,
                        max_level_s=0.5).run()
    assert result.stop_reason == "time_limit" and result.measured_windows == 1
    assert 0.5 <= result.duration_s <= 0.5 + 0.01 + POLL_S  # the limit, then the last answer
    assert result.request_count == pytest.approx((0.5 - 5 * 0.01) / 0.01, abs=1)


def test_a_server_that_never_answers_ends_the_level_with_a_clear_error() -> None:
    client = SimClient(SimClock(), answer=False)
    with pytest.raises(LoadTestError, match=r"No response for 15 s with 2 request\(s\) in flight"):
        _sim_level(client, LoadLevel("concurrency", 2), request_timeout_s=10.0).run()
    assert len(client.issued_ns) == 2
