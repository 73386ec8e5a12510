"""`run_tune` against the real tritonserver: every candidate is a scratch repository served by a
fresh server and load-tested (int8 as another version of the id model included), the result
names a chosen configuration with its repeat and the in-process reference, and applying it
leaves a repository check-repo accepts."""

from __future__ import annotations

import json

import pytest

from attndeploy.serving.packaging.check_repo import check_repository
from attndeploy.serving.tune import SearchSpace, TuneOptions, apply_candidate, run_tune
from attndeploy.serving.tune.configs import read_candidate
from attndeploy.serving.tune.target import read_target
from tests.serving.tune.fixtures import NAME, TEXT, TEXT_CALLS, int8_copy, tiny_repo

pytestmark = pytest.mark.integration

SMALL = SearchSpace(max_batch_size=(8, 16), max_queue_delay_us=(500,), instances=(1,),
                    threads=(1,), preferred=("none",), text_instances=(1,),
                    text_queue_delay_us=(0,))


@pytest.mark.parametrize("call", TEXT_CALLS)
def test_a_text_model_and_its_int8_id_model_are_tuned_on_the_real_server_and_applied(tmp_path,
                                                                                    call):
    repo = tiny_repo(tmp_path, hidden=32, text_bls=call == "bls")
    int8 = int8_copy(tmp_path / "tiny.onnx", tmp_path / "tiny.int8.onnx")
    options = TuneOptions(repo=repo, model=TEXT, int8=int8, concurrency=(1, 8), space=SMALL,
                          budget_minutes=4.0, window_s=0.5, stable_windows=2, max_windows=3,
                          warmup_requests=10, check_fraction=0.05, in_process_seconds=0.3,
                          min_gain=0.0, workdir=tmp_path / "work")
    result = run_tune(options, progress=False)
    data = json.loads(result.to_json())
    measured = {m["name"]: m for m in data["measurements"]}
    # int8 served as version 2 (the file a text model running the ONNX loads), and checked
    # where a request runs alone: its activations are scaled per batch
    int8_run = measured["b8-d500-i1-t1-int8" + ("-ti1-td0" if call == "bls" else "")]
    assert [(lv["concurrency"], lv["checks_done"] > 0) for lv in int8_run["levels"]] == [
        (1, True), (8, False)]
    assert any(note.startswith("answers not compared with onnxruntime at concurrency 8 (the "
                               "int8 file scales activations per batch")
               for note in int8_run["notes"])
    for measurement in data["measurements"]:
        assert measurement["failure"] is None, measurement
        assert all(level["errors"] == 0 and level["checks_failed"] == 0
                   for level in measurement["levels"])
    assert data["chosen"]["name"] in measured
    assert [m["role"] for m in data["measurements"]][-2:] == ["final", "repeat"]
    assert data["chosen"]["chosen_on"] == "final"
    assert data["stability"]["repeat_throughput"] > 0
    assert data["in_process"] and data["served_vs_in_process"]
    assert data["pareto"]
    assert not list((tmp_path / "work").iterdir())  # scratch repositories removed

    applied = apply_candidate(result.target, result.chosen.candidate)
    report = check_repository(repo)
    assert report.passed, report.summary()
    assert applied["check_repo"] in ("passed", "unchanged")
    now = read_target(repo, TEXT)
    served = read_candidate(now.id_config, now.text_config, result.chosen.candidate.precision)
    assert served == result.chosen.candidate
    assert (now.version == 2) == (result.chosen.candidate.precision == "int8")
    assert now.id_model == NAME
