"""The load-test report: when it passes, its JSON (no NaN, warnings, partial or complete)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from attndeploy.errors import LoadTestError
from attndeploy.serving.loadtest.report import CheckSummary, LevelResult, LoadTestReport


def _level(**overrides: Any) -> LevelResult:
    values: dict[str, Any] = {
        "label": "concurrency 1", "mode": "concurrency", "concurrency": 1,
        "request_rate": None, "distribution": None, "batch": 1, "seq_lengths": [16],
        "stable": True, "stop_reason": "stable", "windows": [], "measured_windows": 3,
        "measured_s": 3.0, "request_count": 300, "throughput_infer_per_s": 100.0,
        "throughput_requests_per_s": 100.0,
        "latency_ms": {"count": 300, "avg": 2.0, "min": 1.0, "p50": 2.0, "p90": 2.5,
                       "p95": 3.0, "p99": 4.0, "max": 5.0},
        "error_count": 0, "errors": {}, "error_samples": {}, "server": None,
        "client_inference_count": 300, "count_rel_diff": float("nan"),
        "checks": CheckSummary(3, 0, 0.0), "delayed_requests": 0, "max_schedule_lag_ms": 0.0,
        "warmup_requests": 20, "duration_s": 3.5,
    }
    return LevelResult(**{**values, **overrides})


def _report(*levels: LevelResult) -> LoadTestReport:
    return LoadTestReport("127.0.0.1:1", "m", "2024-01-01T00:00:00+00:00", 1.0, {}, list(levels))


def test_a_report_with_errors_or_failed_checks_does_not_pass() -> None:
    assert _report(_level()).passed
    errors = _level(error_count=2, errors={"StatusCode.INTERNAL": 2},
                    error_samples={"StatusCode.INTERNAL": "boom"})
    report = _report(_level(), errors)
    assert not report and "boom" in report.failures[0]
    assert not _report(_level(checks=CheckSummary(3, 1, 1.0, 0, "'logits' differs")))
    assert not _report()
    with pytest.raises(LoadTestError, match="StatusCode.INTERNAL"):
        report.raise_if_failed()


def test_report_json_has_no_nan_and_warns_about_unstable_levels() -> None:
    body = json.loads(_report(_level(stable=False, stop_reason="max_windows")).to_json())
    assert body["schema"] == "attndeploy.loadtest/1" and body["passed"] is True
    assert body["levels"][0]["count_rel_diff"] is None
    assert "not stable" in body["warnings"][0]


def test_a_complete_report_is_not_partial() -> None:
    body = json.loads(_report(_level()).to_json())
    assert body["partial"] is False and body["partial_reason"] is None and body["passed"]
