"""The result as data: the Pareto front, the choice within the budget, the references, JSON and
the plot."""

from __future__ import annotations

import json

from attndeploy.serving.tune.measure import LevelPoint, Measurement
from attndeploy.serving.tune.options import TuneOptions
from attndeploy.serving.tune.report import write_plot
from attndeploy.serving.tune.result import (
    SCHEMA,
    TuneResult,
    choose,
    closest,
    leaders,
    pareto_front,
)
from attndeploy.serving.tune.space import Candidate
from attndeploy.serving.tune.target import read_target
from tests.serving.tune.fixtures import TEXT, simulated_reference, tiny_repo


def candidate(batch: int) -> Candidate:
    return Candidate(max_batch_size=batch, max_queue_delay_us=0, instances=1, threads=1)


def point(concurrency: int, throughput: float, p95: float, **changes) -> LevelPoint:
    values = dict(concurrency=concurrency, throughput=throughput, p50_ms=p95 / 2, p95_ms=p95,
                  p99_ms=p95, avg_batch_size=2.0, errors=0, checks_done=1, checks_failed=0,
                  stable=True)
    return LevelPoint(**(values | changes))


SLOW = Measurement(candidate(8), "current", (point(1, 100, 2.0), point(16, 900, 9.0)))
FAST = Measurement(candidate(16), "search", (point(1, 110, 2.5), point(16, 1400, 12.0)))
BROKEN = Measurement(candidate(32), "search", (point(1, 5000, 1.0, errors=3),))
AGAIN = Measurement(candidate(16), "repeat", (point(16, 99999, 0.1),))


def test_the_pareto_front_keeps_points_nothing_beats_on_both_axes():
    front = pareto_front([SLOW, FAST, BROKEN, AGAIN])
    assert [(p.name, p.concurrency) for p in front] == [
        ("b8-d0-i1-t1", 1), ("b16-d0-i1-t1", 1), ("b8-d0-i1-t1", 16), ("b16-d0-i1-t1", 16)]


def test_the_choice_is_the_highest_throughput_within_the_budget():
    assert choose([SLOW, FAST, BROKEN, AGAIN], None) is FAST  # errors and repeats never win
    assert choose([SLOW, FAST], 10.0) is SLOW  # FAST's c16 is over 10 ms
    assert choose([SLOW, FAST], 1.0) is None
    assert closest([SLOW, FAST, BROKEN]) == (SLOW, SLOW.levels[0])


def test_the_finalists_are_the_best_distinct_candidates_within_the_budget():
    fast_final = Measurement(candidate(16), "final", (point(16, 1200, 12.0),))
    assert leaders([SLOW, FAST, BROKEN, AGAIN, fast_final], None, 2) == [FAST.candidate,
                                                                          SLOW.candidate]
    assert leaders([SLOW, FAST], None, 1) == [FAST.candidate]
    # FAST's c16 is over 10 ms: its c1 (110/s) is what counts, behind SLOW's c16
    assert leaders([SLOW, FAST], 10.0, 2) == [SLOW.candidate, FAST.candidate]
    assert leaders([BROKEN, AGAIN], None, 2) == []


def test_stability_compares_the_repeat_with_the_finalist_measurement_it_was_chosen_on(tmp_path):
    target = read_target(tiny_repo(tmp_path), TEXT)
    options = TuneOptions(repo=tmp_path / "repo", model=TEXT, concurrency=(1, 16))
    final = Measurement(candidate(16), "final", (point(1, 100, 2.5), point(16, 1000, 12.0)))
    again = Measurement(candidate(16), "repeat", (point(16, 1050, 11.0),))
    result = TuneResult(target=target, options=options, started_at="now", duration_s=1.0,
                        measurements=(SLOW, FAST, final, again),
                        package_default=SLOW.candidate, chosen=final, repeat=again)
    stability = result.stability()
    assert stability["throughput"] == 1000 and stability["search_throughput"] == 1400
    assert stability["relative_difference"] == 50 / 1000 and stability["stable"]
    assert stability["chosen_on"] == "final"
    assert result.versus_default()[1]["throughput_ratio"] == 1000 / 900


def test_the_result_json_says_what_was_chosen_and_how_it_compares(tmp_path):
    target = read_target(tiny_repo(tmp_path), TEXT)
    options = TuneOptions(repo=tmp_path / "repo", model=TEXT, concurrency=(1, 16))
    in_process = (simulated_reference(None, text=True, batch_size=2, seq=32, threads=1,
                                      workers=1, seconds=1, seed=0, text_file=None),)
    result = TuneResult(target=target, options=options, started_at="now", duration_s=1.0,
                        measurements=(SLOW, FAST, AGAIN), package_default=SLOW.candidate,
                        chosen=FAST, repeat=Measurement(candidate(16), "repeat",
                                                        (point(16, 1300, 11.0),)),
                        in_process=in_process)
    data = json.loads(result.to_json())
    assert data["schema"] == SCHEMA and data["partial"] is False
    assert data["chosen"]["name"] == "b16-d0-i1-t1" and data["chosen"]["concurrency"] == 16
    assert data["versus_default"][1] == {"concurrency": 16, "throughput_ratio": 1400 / 900,
                                         "chosen_p95_ms": 12.0, "default_p95_ms": 9.0,
                                         "p95_not_higher": False}
    assert data["stability"]["relative_difference"] == 100 / 1400
    assert data["stability"]["stable"] is True
    assert data["served_vs_in_process"][0]["ratio"] == 110 / 2000
    assert [m["role"] for m in data["measurements"]] == ["current", "search", "repeat"]
    png = write_plot(result, tmp_path / "tune.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
