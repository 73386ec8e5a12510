"""The run without a server: a simulated measurement and clock drive `run_tune` through its
budget, its interrupts and its refusals."""

from __future__ import annotations

from dataclasses import replace

import pytest

from attndeploy.errors import ConfigError, LoadTestError, ServerError
from attndeploy.serving.tune.configs import read_candidate
from attndeploy.serving.tune.measure import Measurement
from attndeploy.serving.tune.options import TuneOptions
from attndeploy.serving.tune.run import run_tune
from attndeploy.serving.tune.space import SearchSpace
from attndeploy.serving.tune.target import read_target
from tests.serving.tune.fixtures import (
    TEXT,
    TEXT_CALLS,
    Simulated,
    simulated_reference,
    tiny_repo,
)

SPACE = SearchSpace(max_batch_size=(4, 8, 16, 32), max_queue_delay_us=(0, 500),
                    instances=(1, 2), threads=(1,), preferred=("none",), text_instances=(1,),
                    text_queue_delay_us=(0,), cores=2)


@pytest.fixture(params=TEXT_CALLS)
def repo(request, tmp_path, monkeypatch):
    """The tiny text model, packaged to run its id model's ONNX itself or to call it by BLS."""
    monkeypatch.setattr("attndeploy.serving.tune.run.find_tritonserver", lambda: None)
    return tiny_repo(tmp_path, text_bls=request.param == "bls")


def is_bls(repo):
    return not read_target(repo, TEXT).text_runs_onnx


def tune(repo, simulated, **changes):
    options = TuneOptions(**({"repo": repo, "model": TEXT, "concurrency": (1, 4, 16),
                              "budget_minutes": 30.0, "space": SPACE} | changes))
    return run_tune(options, progress=False, clock=simulated.clock, measure=simulated,
                    reference=simulated_reference)


def test_the_run_measures_current_then_searches_then_repeats_the_chosen_one(repo):
    simulated = Simulated()
    result = tune(repo, simulated)
    roles = [role for _, role in simulated.calls]
    assert roles[0] == "current" and roles[-3:] == ["final", "final", "repeat"]
    assert result.chosen.role == "final"  # chosen on a fresh measurement
    assert "package_default" not in roles  # the repository holds the package default
    chosen = result.chosen.candidate  # no batch above 16 forms at concurrency 16
    assert (chosen.max_batch_size, chosen.instances, chosen.max_queue_delay_us) == (16, 2, 0)
    assert result.search["stopped_because"].startswith("converged")
    assert result.repeat.candidate == result.chosen.candidate
    assert result.in_process and result.stability()["stable"]
    assert result.versus_default()[-1]["throughput_ratio"] > 1.3


def lucky(simulated, name, factor):
    """`simulated`, but `name`'s search measurement reads `factor` x its throughput: the noisy
    high reading the search keeps as its best (the winner's curse)."""
    def measure(target, candidate, settings, workdir, *, role, on_level=None):
        measurement = simulated(target, candidate, settings, workdir, role=role,
                                on_level=on_level)
        if candidate.name != name or role not in ("current", "search"):
            return measurement
        return replace(measurement, levels=tuple(replace(p, throughput=p.throughput * factor)
                                                 for p in measurement.levels))
    return measure


def test_the_choice_is_made_on_the_finalists_fresh_measurements_not_the_search_s(repo):
    start = read_candidate(read_target(repo, TEXT).id_config, read_target(repo, TEXT).text_config)
    simulated = Simulated()
    # the repository's own configuration reads 10x high once: nothing the search measures
    # after it looks better, so it leads the search
    result = run_tune(TuneOptions(repo=repo, model=TEXT, concurrency=(1, 4, 16),
                                  budget_minutes=30.0, space=SPACE),
                      progress=False, clock=simulated.clock, reference=simulated_reference,
                      measure=lucky(simulated, start.name, 10.0))
    finals = [m for m in result.measurements if m.role == "final"]
    assert [m.candidate for m in finals][0] == start and len(finals) == 2
    fresh = {m.candidate: m.score(None) for m in finals}
    assert fresh[finals[1].candidate] > fresh[start]  # measured again, the leader falls back
    assert result.chosen is finals[1] and result.chosen.candidate != start
    stability = result.stability()
    assert stability["chosen_on"] == "final" and stability["stable"]
    assert stability["search_throughput"] == stability["throughput"]  # its numbers were fair
    assert result.to_dict()["chosen"]["chosen_on"] == "final"


def test_with_one_finalist_the_search_s_leader_is_measured_again_and_kept(repo):
    simulated = Simulated()
    result = tune(repo, simulated, finalists=1)
    assert [role for _, role in simulated.calls][-2:] == ["final", "repeat"]
    assert result.chosen.role == "final"
    assert result.stability()["search_throughput"] == result.stability()["throughput"]


def test_without_time_for_the_finalists_the_choice_rests_on_the_search_and_says_so(repo):
    simulated = Simulated(seconds=30.0)

    def slowing(target, candidate, settings, workdir, *, role, on_level=None):
        if len(simulated.calls) == 2:
            simulated.seconds = 250.0  # the third measurement takes far longer than estimated
        return simulated(target, candidate, settings, workdir, role=role, on_level=on_level)

    result = run_tune(TuneOptions(repo=repo, model=TEXT, concurrency=(1, 4, 16),
                                  budget_minutes=10.0, space=SPACE),
                      progress=False, clock=simulated.clock, measure=slowing,
                      reference=simulated_reference)
    roles = [role for _, role in simulated.calls]
    assert "final" not in roles and roles[-1] == "repeat"
    assert result.chosen.role in ("current", "search")
    assert result.stability()["chosen_on"] == result.chosen.role
    assert any("rests on the search's measurements" in note for note in result.notes)
    assert simulated.now <= 10 * 60


def test_the_search_stops_when_the_next_candidate_would_not_leave_time_for_the_repeat(repo):
    simulated = Simulated(seconds=60.0)
    result = tune(repo, simulated, budget_minutes=5.0)
    assert result.search["stopped_because"] == "time budget"
    assert simulated.now <= 5 * 60
    assert simulated.calls[-1][1] == "repeat"


def test_a_budget_shorter_than_one_measurement_is_refused_before_anything_runs(repo):
    simulated = Simulated()
    with pytest.raises(ConfigError, match="shorter than one measurement"):
        tune(repo, simulated, budget_minutes=0.1)
    assert simulated.calls == []


def test_a_text_file_line_that_cannot_be_sent_is_refused_before_anything_runs(repo, tmp_path):
    """Not once per candidate (each then failing, and the run saying no candidate was measured):
    the file is read first, a line over the limit per text refused without being read whole."""
    from tests.long_lines import long_line_file

    simulated = Simulated()
    texts = long_line_file(tmp_path / "texts.txt", before=b"w1 alpha\n")
    with pytest.raises(LoadTestError, match=r"^line 2 of .*texts.txt has more than 65536 bytes, "
                                            "the limit per text$"):
        tune(repo, simulated, text_file=texts)
    assert simulated.calls == []


def test_no_candidate_within_the_latency_budget_names_the_closest_and_returns_nothing(repo):
    text = "-ti1-td0" if is_bls(repo) else ""  # a text model run by BLS has its own fields
    with pytest.raises(LoadTestError, match=r"no configuration kept p95 within 0.01 ms .* the "
                                            rf"closest was b\d+-d\d+-i\d-t1{text} at "
                                            r"concurrency 1: p95 [\d.]+ ms"):
        tune(repo, Simulated(), latency_budget_ms=0.01)


def test_a_latency_budget_keeps_the_chosen_level_within_it(repo):
    result = tune(repo, Simulated(), latency_budget_ms=15.0)
    assert result.chosen_level.p95_ms <= 15.0


def test_ctrl_c_hands_over_what_was_measured_then_stops(repo):
    partial = []
    simulated = Simulated(interrupt_at=4)
    with pytest.raises(KeyboardInterrupt):
        run_tune(TuneOptions(repo=repo, model=TEXT, concurrency=(1, 16), space=SPACE),
                 progress=False, clock=simulated.clock, measure=simulated,
                 on_partial=partial.append)
    (result,) = partial
    assert result.partial and result.partial_reason == "interrupted"
    assert len(result.measurements) == 3 and result.chosen is not None
    assert result.to_dict()["partial"] is True


def test_a_repository_whose_own_configuration_cannot_be_served_is_a_server_error(repo):
    def failing(target, candidate, settings, workdir, *, role, on_level=None):
        return Measurement(candidate, role, (), "server: model 'tiny' failed to load: boom")

    with pytest.raises(ServerError, match="own configuration of tiny_text could not be measured"):
        run_tune(TuneOptions(repo=repo, model=TEXT), progress=False, measure=failing)


def test_a_failed_candidate_is_skipped_and_the_search_goes_on(repo):
    simulated = Simulated()

    def flaky(target, candidate, settings, workdir, *, role, on_level=None):
        if candidate.instances == 2:
            return Measurement(candidate, role, (), "server: model 'tiny' failed to load")
        return simulated(target, candidate, settings, workdir, role=role, on_level=on_level)

    result = run_tune(TuneOptions(repo=repo, model=TEXT, concurrency=(1, 16), space=SPACE),
                      progress=False, clock=simulated.clock, measure=flaky,
                      reference=simulated_reference)
    assert result.chosen.candidate.instances == 1
    assert any(m.failure for m in result.measurements)


def test_without_a_tritonserver_the_run_stops_before_measuring(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNDEPLOY_TRITONSERVER", str(tmp_path / "no-such-tritonserver"))
    simulated = Simulated()
    with pytest.raises(ServerError):
        run_tune(TuneOptions(repo=tiny_repo(tmp_path), model=TEXT), progress=False,
                 measure=simulated)
    assert simulated.calls == []


def test_int8_is_tried_first_when_offered(repo, tmp_path):
    from tests.serving.tune.fixtures import int8_copy

    int8 = int8_copy(tmp_path / "tiny.onnx", tmp_path / "tiny.int8.onnx")
    simulated = Simulated()
    result = tune(repo, simulated, int8=int8, space=replace(SPACE, max_batch_size=(8,)))
    assert simulated.calls[1][0].endswith("-int8-ti1-td0" if is_bls(repo) else "-int8")
    assert result.chosen.candidate.precision == "int8"


@pytest.mark.parametrize("activations", ["per-batch", "per-row"])
def test_a_chosen_int8_file_left_unchecked_under_load_is_said_so(repo, tmp_path, activations):
    """The load tester checks a per-batch int8 file at concurrency 1 only; when the choice is
    such a file, the run's notes (which the CLI prints) say which levels went unchecked."""
    from tests.serving.tune.fixtures import int8_copy

    int8 = int8_copy(tmp_path / "tiny.onnx", tmp_path / f"tiny.{activations}.onnx",
                     activations=activations)
    result = tune(repo, Simulated(), int8=int8, space=replace(SPACE, max_batch_size=(8,)))
    name = result.chosen.candidate.name
    assert result.chosen.candidate.precision == "int8"
    said = [note for note in result.notes if note.startswith(f"the chosen {name}: ")]
    if activations == "per-row":
        assert said == []
    else:
        assert said == [f"the chosen {name}: answers not compared with onnxruntime at "
                        "concurrency 4, 16 (the int8 file scales activations per batch, so a "
                        "batched answer differs from the request run alone; `quantize` with its "
                        "default `--activations per-row` makes one that is checked at every "
                        "level)"]
