"""The generate load tester's arithmetic without a server (attndeploy.serving.loadtest.generation):
a fake client whose pieces arrive on a known schedule gives the TTFT and inter-token latency it
was built with, tokens/s and requests/s over the level, errors counted per level, and checks
that count a wrong token as a mismatch."""

from __future__ import annotations

import pytest

from attndeploy.errors import LoadTestError, ServerError
from attndeploy.serving.client.generate import GenerateResult
from attndeploy.serving.loadtest.generation import GenerateLoadConfig, run_generate_load_test


def fake_send(first_s: float, gap_s: float, fail_prompt: str | None = None):
    def send(prompt: str, max_tokens: int) -> GenerateResult:
        if prompt == fail_prompt:
            raise ServerError("refused")
        result = GenerateResult(started=100.0, token_ids=list(range(max_tokens)))
        result.arrivals = [100.0 + first_s + i * gap_s for i in range(max_tokens)]
        return result
    return send


class Oracle:
    def __init__(self, wrong: bool, text: str = "") -> None:
        self.wrong, self.text = wrong, text

    def generate(self, prompt: str, max_tokens: int):
        from types import SimpleNamespace

        ids = list(range(max_tokens))
        return [SimpleNamespace(text=self.text, token_ids=ids[::-1] if self.wrong else ids)]


def config(**overrides) -> GenerateLoadConfig:
    return GenerateLoadConfig(**{"model": "m_generate", "url": "x", "concurrency": (1, 2),
                                 "requests_per_level": 6, "max_tokens": (4, 4),
                                 "prompts": ("a", "b"), **overrides})


def test_the_latencies_are_the_schedule_the_pieces_came_on():
    report = run_generate_load_test(config(), send=fake_send(0.05, 0.01))
    assert [lv.value for lv in report.levels] == [1, 2]
    for level in report.levels:
        assert level.ttft_ms["p50"] == pytest.approx(50.0)
        assert level.itl_ms["p99"] == pytest.approx(10.0)
        assert level.tokens == 24 and level.errors == 0
        assert level.tokens_per_s == pytest.approx(24 / level.wall_s)
    assert report.passed and report.to_dict()["levels"][0]["tokens"] == 24


def test_errors_and_wrong_tokens_fail_the_report(monkeypatch):
    report = run_generate_load_test(config(prompts=("a", "bad")),
                                    send=fake_send(0.01, 0.01, fail_prompt="bad"))
    assert [lv.errors for lv in report.levels] == [3, 3]
    with pytest.raises(LoadTestError, match="3 errors"):
        report.raise_if_failed()
    import attndeploy.generation.loop as loop

    monkeypatch.setattr(loop, "DecoderModel", lambda path, threads: Oracle(wrong=True))
    checked = run_generate_load_test(config(onnx_path="m.onnx", check_fraction=1.0),
                                     send=fake_send(0.01, 0.01))
    assert all(lv.checked == 6 and lv.mismatched == 6 for lv in checked.levels)
    assert not checked.passed
    # the same ids but another text (a translation is checked by its text too)
    monkeypatch.setattr(loop, "DecoderModel", lambda path, threads: Oracle(False, "other"))
    texts = run_generate_load_test(config(onnx_path="m.onnx", check_fraction=1.0),
                                   send=fake_send(0.01, 0.01))
    assert all(lv.checked == 6 and lv.mismatched == 6 for lv in texts.levels)


def test_a_config_without_levels_or_with_a_bad_range_is_refused():
    with pytest.raises(LoadTestError, match="at least one concurrency"):
        config(concurrency=())
    with pytest.raises(LoadTestError, match="low <= high"):
        config(max_tokens=(5, 2))
