"""The coordinate search, driven by scores from formulas (no server)."""

from __future__ import annotations

from attndeploy.serving.tune.search import SearchLog, better, coordinate_search
from attndeploy.serving.tune.space import Candidate, SearchSpace

START = Candidate(max_batch_size=8, max_queue_delay_us=500, instances=1, threads=1)
SPACE = SearchSpace(max_batch_size=(1, 2, 4, 8, 16, 32, 64), max_queue_delay_us=(0, 500, 2000),
                    instances=(1, 2, 3, 4), threads=(1, 2), preferred=("none", "max"), cores=4)


def drive(space, start, score, known=None, **kwargs):
    """Run the search to its end; (best, every candidate it asked for, its log)."""
    log = SearchLog()
    search = coordinate_search(space, start, known, log=log, **kwargs)
    asked = []
    try:
        candidate = next(search)
        while True:
            asked.append(candidate)
            candidate = search.send(score(candidate))
    except StopIteration as done:
        return done.value, asked, log


def peaked(candidate: Candidate) -> float:
    """Best at batch 32, 2 instances, no delay; threads and preferred sizes do not matter."""
    return (1000.0 - 10 * abs(candidate.max_batch_size.bit_length() - 6) ** 2
            - 50 * abs(candidate.instances - 2) - candidate.max_queue_delay_us / 100)


def test_the_search_climbs_each_dimension_to_its_peak():
    best, asked, log = drive(SPACE, START, peaked, min_gain=0.0)
    assert (best.max_batch_size, best.instances, best.max_queue_delay_us) == (32, 2, 0)
    assert len(asked) == len(set(asked))  # never the same candidate twice
    assert "max_batch_size: 8 -> 32" in log.moves
    assert len(asked) < 30  # the whole space holds 7 * 3 * 4 * 2 * 2 = 336 candidates


def test_a_dimension_tries_both_neighbours_then_walks_the_better_side_until_it_stops_paying():
    best, asked, _ = drive(SPACE, START, peaked, min_gain=0.0)
    batch_sizes = [c.max_batch_size for c in asked if c.instances == 1
                   and c.max_queue_delay_us == 500 and c.threads == 1 and c.preferred == "none"]
    assert batch_sizes == [8, 16, 4, 32, 64]  # both neighbours, then up one step past the peak


def test_the_better_neighbour_wins_even_when_the_other_side_improves_too():
    def downhill(candidate: Candidate) -> float:  # smaller batches are better, 16 a bit too
        return {16: 1100.0, 8: 1000.0, 4: 1500.0, 2: 1600.0, 1: 1550.0}.get(
            candidate.max_batch_size, 0.0)

    space = SearchSpace(max_batch_size=(1, 2, 4, 8, 16), max_queue_delay_us=(500,),
                        instances=(1,), threads=(1,), preferred=("none",))
    best, asked, _ = drive(space, START, downhill, min_gain=0.05)
    assert best.max_batch_size == 2
    assert [c.max_batch_size for c in asked] == [8, 16, 4, 2, 1]


def test_a_step_over_the_latency_budget_ends_that_direction():
    def budgeted(candidate: Candidate) -> float | None:  # batch 16 and up: over the budget
        return None if candidate.max_batch_size >= 16 else peaked(candidate)

    best, asked, _ = drive(SPACE, START, budgeted, min_gain=0.0)
    assert best.max_batch_size == 8
    assert not any(c.max_batch_size > 16 for c in asked)


def test_a_gain_below_min_gain_is_not_a_move():
    best, _, log = drive(SPACE, START, lambda c: 1000.0 + c.max_batch_size, min_gain=0.05)
    assert best == START
    assert log.moves == []


def test_pruned_candidates_are_never_asked_for():
    space = SearchSpace(max_batch_size=(8,), max_queue_delay_us=(500,), instances=(1, 2, 4),
                        threads=(1, 2), preferred=("none",), cores=2)
    _, asked, log = drive(space, START, lambda c: 100.0 * c.instances * c.threads, min_gain=0.0)
    assert all(c.instances * c.threads <= 2 for c in asked)
    assert log.pruned  # 4 instances and 2x2 were named, not measured


def test_known_scores_are_not_asked_for_again():
    known = {START: peaked(START)}
    _, asked, _ = drive(SPACE, START, peaked, known=known, min_gain=0.0)
    assert START not in asked


def test_any_score_beats_none_and_none_beats_nothing():
    assert better(1.0, None, 0.05)
    assert not better(None, 1.0, 0.05)
    assert not better(104.0, 100.0, 0.05) and better(106.0, 100.0, 0.05)
