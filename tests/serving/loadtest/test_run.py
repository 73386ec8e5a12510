"""`run_load_test` with a faked server: max_seq refusals, partial reports, window callbacks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import onnx
import pytest

from attndeploy.errors import LoadTestError, ServerError
from attndeploy.serving import loadtest as loadtest_module
from attndeploy.serving.loadtest import (
    LoadTestConfig,
    max_seq_from_onnx,
    run_load_test,
    served_max_seq,
)
from attndeploy.serving.loadtest.report import LoadTestReport
from attndeploy.serving.loadtest.stats import WindowStats
from tests.serving.loadtest.fakes import CountingClient, fake_server
from tests.serving.loadtest_fixtures import TINY_VOCAB, build_tiny_onnx


def _onnx_with_metadata(tmp_path: Path, props: dict[str, str]) -> Path:
    path = build_tiny_onnx(tmp_path / "model.onnx")
    model = onnx.load(str(path))
    onnx.helper.set_model_props(model, props)
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize(
    "props",
    [{"attndeploy.max_seq": "16"},
     {"attndeploy.config": json.dumps({"max_seq": 16, "vocab_size": TINY_VOCAB})}],
    ids=["export-limit", "model-config"],
)
def test_a_seq_length_above_the_onnx_max_seq_is_refused_before_connecting(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, props: dict[str, str]
) -> None:
    path = _onnx_with_metadata(tmp_path, props)
    assert max_seq_from_onnx(path) == 16
    fake_server(monkeypatch, None)
    config = LoadTestConfig(model="m", seq_lengths=(8, 32), onnx_path=path)
    with pytest.raises(LoadTestError) as info:
        run_load_test(config, progress=False)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("seq length 32 exceeds the max_seq 16 of model 'm' (from ")
    assert "use lengths up to 16" in message


def test_a_seq_length_above_the_served_max_seq_is_refused_before_any_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = CountingClient()
    fake_server(monkeypatch, client,
                {"max_batch_size": 8, "parameters": {"MAX_SEQ": {"string_value": "16"}}})
    config = LoadTestConfig(model="m", seq_lengths=(16, 17), window_requests=10)
    with pytest.raises(LoadTestError, match=r"seq length 17 exceeds the max_seq 16 of model 'm' "
                                            r"\(the served config's MAX_SEQ parameter\)"):
        run_load_test(config, progress=False)
    assert client.issued == 0


def test_lengths_within_max_seq_and_models_without_one_are_not_refused(tmp_path: Path) -> None:
    assert max_seq_from_onnx(build_tiny_onnx(tmp_path / "plain.onnx")) is None
    assert served_max_seq({}) is None
    assert served_max_seq({"parameters": {"MAX_SEQ": {"string_value": "x"}}}) is None
    assert served_max_seq({"parameters": {"MAX_SEQ": {"string_value": "64"}}}) == 64
    loadtest_module.check_seq_lengths(LoadTestConfig(model="m", seq_lengths=(16,)), 16, "here")
    loadtest_module.check_seq_lengths(LoadTestConfig(model="m", seq_lengths=(99,)), None, "x")


def _dying_config(**overrides: Any) -> LoadTestConfig:
    return LoadTestConfig(**{
        "model": "m", "concurrency": (1, 2), "window_requests": 40, "warmup_requests": 5,
        "max_windows": 2, "stable_windows": 2, "stability_threshold": 0.5,
        "check_fraction": 0.0, "pool_size": 2, "seq_lengths": (4,), **overrides,
    })


def test_a_server_dying_mid_test_hands_over_what_was_measured_as_partial(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = CountingClient()
    # Each level: 5 warm-up requests and 2 windows of 40. Level 2 dies in its second window.
    client.dead_after = 150
    fake_server(monkeypatch, client)
    partial: list[LoadTestReport] = []
    with pytest.raises(ServerError, match="stopped answering during the load test") as info:
        run_load_test(_dying_config(), progress=False, on_partial=partial.append)
    (report,) = partial
    assert report.partial and not report.passed
    assert report.partial_reason == str(info.value)
    assert report.failures[0] == f"the load test stopped early: {info.value}"
    first, second = report.levels
    assert first.stop_reason in ("stable", "max_windows") and first.error_count == 0
    assert second.stop_reason == "aborted" and second.concurrency == 2
    assert second.measured_windows >= 1 and second.request_count > 0
    assert second.error_count > 0  # the refused connections that revealed the death
    body = json.loads(report.to_json())
    assert body["partial"] is True and body["partial_reason"] == str(info.value)
    assert [lv["stop_reason"] for lv in body["levels"]] == [first.stop_reason, "aborted"]


def test_on_window_sees_every_window_of_every_level_as_it_closes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_server(monkeypatch, CountingClient())
    seen: list[WindowStats] = []
    report = run_load_test(_dying_config(), progress=False, on_window=seen.append)
    assert [w.requests for w in seen] == [w["requests"] for level in report.levels
                                          for w in level.windows]
    assert len(seen) == sum(len(level.windows) for level in report.levels) >= 2
