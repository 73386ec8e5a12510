"""The load tester's statistics: percentiles, latency, stable windows, server stats, arrivals."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from attndeploy.serving.loadtest.stats import (
    LatencySummary,
    ServerStats,
    WindowStats,
    arrival_offsets,
    compare_outputs,
    is_stable,
    percentile,
)


def test_percentiles_are_nearest_rank() -> None:
    values = np.arange(1, 101, dtype=float)  # 1..100
    assert [percentile(values, p) for p in (50, 90, 95, 99, 100)] == [50, 90, 95, 99, 100]
    assert percentile([7.0], 99) == 7.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0


def test_latency_summary_is_in_milliseconds_and_empty_is_none() -> None:
    summary = LatencySummary.from_ns([3_000_000, 1_000_000, 2_000_000])
    assert (summary.count, summary.min, summary.p50, summary.max) == (3, 1.0, 2.0, 3.0)
    assert summary.avg == pytest.approx(2.0)
    empty = LatencySummary.from_ns([])
    assert empty.count == 0 and empty.p95 is None and empty.avg is None


def _window(i: int, rps: float, p95: float, requests: int = 100) -> WindowStats:
    return WindowStats(i, 1.0, requests, 0, rps, p95 / 2, p95)


def test_three_windows_within_ten_percent_are_stable() -> None:
    windows = [_window(0, 50, 9), _window(1, 100, 2.0), _window(2, 105, 2.1), _window(3, 97, 2.0)]
    assert is_stable(windows, 3, 0.10)


def test_a_throughput_outlier_in_the_last_windows_is_unstable() -> None:
    windows = [_window(0, 100, 2.0), _window(1, 100, 2.0), _window(2, 130, 2.0)]
    assert not is_stable(windows, 3, 0.10)


def test_a_p95_outlier_in_the_last_windows_is_unstable() -> None:
    windows = [_window(0, 100, 2.0), _window(1, 100, 2.6), _window(2, 100, 2.0)]
    assert not is_stable(windows, 3, 0.10)


def test_too_few_or_empty_windows_are_unstable() -> None:
    assert not is_stable([_window(0, 100, 2.0), _window(1, 100, 2.0)], 3, 0.10)
    empty = WindowStats(2, 1.0, 0, 0, 0.0, None, None)
    assert not is_stable([_window(0, 100, 2.0), _window(1, 100, 2.0), empty], 3, 0.10)


def _stats_json(inference: int, execution: int, success: int, queue_ns: int,
                infer_ns: int, version: str = "1") -> dict[str, Any]:
    """The shape of `get_inference_statistics(as_json=True)`: numbers are strings, none is {}."""
    def entry(count: int, ns: int) -> dict[str, str]:
        return {"count": str(count), "ns": str(ns)} if count else {}

    return {
        "name": "m",
        "version": version,
        "inference_count": str(inference),
        "execution_count": str(execution),
        "inference_stats": {
            "success": entry(success, success * 3000),
            "fail": {},
            "queue": entry(success, queue_ns),
            "compute_input": entry(success, success * 100),
            "compute_infer": entry(success, infer_ns),
            "compute_output": entry(success, success * 200),
        },
    }


def test_server_stats_differences_give_per_request_averages_and_batch_size() -> None:
    before = ServerStats.from_json({"model_stats": [_stats_json(0, 0, 0, 0, 0)]}, "m")
    after = ServerStats.from_json(
        {"model_stats": [_stats_json(40, 10, 40, 40 * 500_000, 40 * 2_000_000)]}, "m"
    )
    delta = after.minus(before)
    assert delta.request_count == 40 and delta.avg_batch_size == 4.0
    assert delta.avg_us("queue") == 500.0 and delta.avg_us("compute_infer") == 2000.0
    assert delta.avg_us("compute_input") == 0.1 and delta.avg_us("compute_output") == 0.2
    assert delta.avg_us("fail") is None


def test_server_stats_sum_the_versions_of_the_model_and_ignore_others() -> None:
    raw = {
        "model_stats": [
            _stats_json(4, 2, 4, 0, 0, version="1"),
            _stats_json(6, 3, 6, 0, 0, version="2"),
            {**_stats_json(100, 1, 100, 0, 0), "name": "other"},
        ]
    }
    stats = ServerStats.from_json(raw, "m")
    assert (stats.inference_count, stats.execution_count, stats.counts["success"]) == (10, 5, 10)
    with pytest.raises(KeyError):
        ServerStats.from_json(raw, "missing")


def test_poisson_arrivals_have_the_requested_mean_rate() -> None:
    offsets = arrival_offsets(200.0, "poisson", np.random.default_rng(0))
    times = np.array([next(offsets) for _ in range(20_000)])
    assert 20_000 / times[-1] == pytest.approx(200.0, rel=0.03)
    gaps = np.diff(times)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.05)  # exponential: CV = 1


def test_constant_arrivals_are_evenly_spaced() -> None:
    offsets = arrival_offsets(50.0, "constant", np.random.default_rng(0))
    times = [next(offsets) for _ in range(5)]
    assert times == pytest.approx([0.02, 0.04, 0.06, 0.08, 0.10])
    with pytest.raises(ValueError):
        next(arrival_offsets(0.0, "constant", np.random.default_rng(0)))


def test_comparison_fails_only_beyond_atol_and_rtol() -> None:
    ref = {"logits": np.array([[1000.0, 0.0]], np.float32)}
    near = {"logits": np.array([[1000.05, 5e-6]], np.float32)}  # within rtol / within atol
    assert compare_outputs(near, ref, atol=1e-5, rtol=1e-4).passed
    far = {"logits": np.array([[1000.0, 1e-3]], np.float32)}
    check = compare_outputs(far, ref, atol=1e-5, rtol=1e-4)
    assert not check.passed and check.max_abs_error == pytest.approx(1e-3)


def test_gates_must_be_equal_and_shapes_must_match() -> None:
    ref = {"gates": np.array([[True, False, True]])}
    flipped = compare_outputs({"gates": np.array([[True, True, True]])}, ref, atol=1, rtol=1)
    assert not flipped.passed and flipped.mismatched_gates == 1
    assert not compare_outputs({"gates": np.array([[True]])}, ref, atol=1, rtol=1).passed
    assert "missing" in compare_outputs({}, ref, atol=1, rtol=1).reason
