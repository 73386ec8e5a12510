"""Measuring one candidate (`tune.measure`): what reaches the load tester, and what the
measurement keeps of it; the server and the load test are stand-ins here (test_tune_served.py
runs the real ones)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from attndeploy.errors import LoadTestError
from attndeploy.serving.loadtest.report import CheckSummary
from attndeploy.serving.loadtest.stats import WindowStats
from attndeploy.serving.tune import measure
from attndeploy.serving.tune.configs import read_candidate
from attndeploy.serving.tune.options import TuneOptions
from attndeploy.serving.tune.target import read_target
from tests.serving.tune.fixtures import TEXT, int8_copy, tiny_repo


class StandInServer:
    """A context manager with a server's addresses, whose log says a stub died."""

    grpc_url, http_url = "127.0.0.1:1", "127.0.0.1:2"

    def __init__(self, *args, log_file, **kwargs):
        log_file.parent.mkdir(parents=True, exist_ok=True)
        log_file.write_text("I1203 started\nI1203 model ready\n\nStub process died\n")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


@pytest.fixture
def stand_ins(monkeypatch):
    monkeypatch.setattr(measure, "materialize", lambda target, candidate, folder: folder)
    monkeypatch.setattr(measure, "TritonServer", StandInServer)


def test_a_measurement_hands_each_window_to_on_window_and_keeps_a_failed_server_s_log(
        tmp_path, monkeypatch, stand_ins):
    """`measure_candidate(on_window=...)` reaches the load test (a benchmark reads the CPU at
    the windows' edges), and a failed measurement keeps the end of its server's log in its
    notes (the scratch folder with the log is removed)."""
    repo = tiny_repo(tmp_path / "repo")
    target = read_target(repo, TEXT)
    window = WindowStats(index=0, duration_s=1.0, requests=5, errors=0, throughput_rps=5.0,
                         p50_ms=1.0, p95_ms=2.0)

    def load_test(config, *, progress, on_window=None):
        on_window(window)
        raise LoadTestError("stand-in: no server")

    monkeypatch.setattr(measure, "run_load_test", load_test)
    seen = []
    settings = TuneOptions(repo=repo, model=TEXT, concurrency=(16,)).settings()
    start = read_candidate(target.id_config, target.text_config)
    result = measure.measure_candidate(target, start, settings, tmp_path / "work",
                                       on_window=seen.append)
    assert seen == [window] and result.failure.endswith("stand-in: no server")
    assert result.notes == (
        "the server's log ended: I1203 started | I1203 model ready | Stub process died",)
    assert not (tmp_path / "work").exists() or not any((tmp_path / "work").iterdir())


@pytest.mark.parametrize("activations", ["per-batch", "per-row"])
def test_int8_answers_are_checked_where_the_load_tester_can_and_unchecked_levels_are_named(
        tmp_path, monkeypatch, stand_ins, activations):
    """The tuner asks for checks at every level and leaves to the load tester which it can
    make (a per-batch int8 file's batched answers cannot be checked exactly; a per-row file's
    can); the measurement counts the checks and names the levels left unchecked, with why."""
    repo = tiny_repo(tmp_path)
    int8 = int8_copy(tmp_path / "tiny.onnx", tmp_path / f"tiny.{activations}.onnx",
                     activations=activations)
    target = read_target(repo, TEXT, int8)
    assert target.int8.scaled_per_batch == (activations == "per-batch")
    asked = []

    def load_test(config, *, progress, on_window=None):  # checks as the load tester makes them
        (concurrency,) = config.concurrency
        asked.append((concurrency, config.check_fraction, config.onnx_path))
        done = 0 if target.int8.scaled_per_batch and concurrency > 1 else 5
        level = SimpleNamespace(concurrency=concurrency, throughput_infer_per_s=100.0 * concurrency,
                                latency_ms={"p50": 1.0, "p95": 2.0, "p99": 3.0}, server=None,
                                error_count=0, checks=CheckSummary(done=done), stable=True)
        return SimpleNamespace(levels=[level])

    monkeypatch.setattr(measure, "run_load_test", load_test)
    settings = TuneOptions(repo=repo, model=TEXT, concurrency=(1, 4, 16),
                           check_fraction=0.1).settings()
    candidate = read_candidate(target.id_config, target.text_config, "int8")
    result = measure.measure_candidate(target, candidate, settings, tmp_path / "work")
    assert asked == [(c, 0.1, target.int8.path) for c in (1, 4, 16)]
    assert [p.checks_done for p in result.levels] == (
        [5, 0, 0] if activations == "per-batch" else [5, 5, 5])
    if activations == "per-row":
        assert result.notes == ()
    else:
        (note,) = result.notes
        assert note.startswith("answers not compared with onnxruntime at concurrency 4, 16 "
                               "(the int8 file scales activations per batch")
