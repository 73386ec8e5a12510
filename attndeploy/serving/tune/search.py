"""The search: coordinate hill climbing over the candidate space, in the spirit of model
analyzer's quick search.

Model analyzer's quick search (`QuickRunConfigGenerator`) walks a grid of coordinates
(max_batch_size as powers of two, instance count) from the smallest corner: it measures enough
neighbours within a radius of the current coordinate, steps towards their throughput-weighted
centre, and stops when the step does not move or revisits a coordinate; a measurement that
breaks a constraint (the latency budget) counts as no throughput. Its concurrency sweep stops
when throughput stops growing.

Here the walk starts from the configuration the repository serves (a reasonable point, not the
smallest corner, which on CPU wastes measurements on max_batch_size 1) and moves along one
dimension at a time (`space.DIMENSION_ORDER`):

- an ordered dimension (batch size, delay, instances, threads, the text model's instances and
  delay): both neighbours of the current value are measured (model analyzer's neighbourhood of
  radius 1 along that axis), and from the better one that raised the objective by more than
  `min_gain` the walk goes on in that direction one value at a time while each step does. A
  step that misses the latency budget (no level within it) or fails ends the walk: the
  dimension stops when throughput stops improving or latency exceeds the budget;
- a set of alternatives (precision, preferred batch sizes) is tried value by value, the best
  kept;
- passes over all dimensions repeat until one pass moves nowhere.

The objective is a candidate's best throughput at any concurrency level whose p95 is within the
budget (`Measurement.score`). No candidate is measured twice, and candidates the space prunes
(more onnxruntime threads than cores) are never measured. The search is a generator: it yields
the next candidate to measure and receives its score (None: failed or over the budget), so the
caller owns the measuring, the time budget and the interrupts.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field

from attndeploy.serving.tune.space import Candidate, Dimension, SearchSpace

Score = float | None


def better(score: Score, than: Score, min_gain: float) -> bool:
    """Whether `score` beats `than` by more than `min_gain` (any score beats None)."""
    if score is None:
        return False
    return than is None or score > than * (1.0 + min_gain)


@dataclass
class SearchLog:
    """What the search did, for the report: moves taken and candidates it skipped."""

    moves: list[str] = field(default_factory=list)
    pruned: dict[str, str] = field(default_factory=dict)  # candidate name -> why
    passes: int = 0


def coordinate_search(
    space: SearchSpace,
    start: Candidate,
    known: dict[Candidate, Score] | None = None,
    *,
    min_gain: float = 0.05,
    log: SearchLog | None = None,
) -> Generator[Candidate, Score, Candidate]:
    """Yield candidates to measure; `send` each one's score. Returns (StopIteration.value) the
    best candidate found. `known`: scores measured before (never yielded again), `start`'s
    included if it was measured; otherwise `start` is yielded first."""
    scores: dict[Candidate, Score] = dict(known or {})
    log = log if log is not None else SearchLog()

    def score_of(candidate: Candidate) -> Generator[Candidate, Score, Score]:
        if candidate not in scores:
            scores[candidate] = yield candidate
        return scores[candidate]

    best = start
    best_score = yield from score_of(start)
    while True:
        log.passes += 1
        moved = False
        for dimension in space.dimensions(best):
            found, found_score = yield from _walk(space, dimension, best, best_score, score_of,
                                                  min_gain, log)
            if found != best:
                log.moves.append(f"{dimension.name}: {getattr(best, dimension.name)} -> "
                                 f"{getattr(found, dimension.name)}")
                best, best_score, moved = found, found_score, True
        if not moved:
            return best


def _walk(space: SearchSpace, dimension: Dimension, best: Candidate, best_score: Score,
          score_of, min_gain: float, log: SearchLog
          ) -> Generator[Candidate, Score, tuple[Candidate, Score]]:
    """The best candidate along `dimension` from `best` (itself when nothing beats it)."""
    current = getattr(best, dimension.name)
    if not dimension.ordered:
        for value in dimension.values:
            if value == current:
                continue
            candidate = best.with_value(dimension.name, value)
            if _pruned(space, candidate, log):
                continue
            score = yield from score_of(candidate)
            if better(score, best_score, min_gain):
                best, best_score = candidate, score
        return best, best_score
    index = dimension.values.index(current)
    steps = []  # (score, step, candidate) of the neighbour on each side
    for step in (1, -1):
        position = index + step
        if not 0 <= position < len(dimension.values):
            continue
        candidate = best.with_value(dimension.name, dimension.values[position])
        if _pruned(space, candidate, log):
            continue
        score = yield from score_of(candidate)
        if better(score, best_score, min_gain):
            steps.append((score, step, candidate))
    if not steps:
        return best, best_score
    best_score, step, best = max(steps, key=lambda found: found[0])
    position = dimension.values.index(getattr(best, dimension.name)) + step
    while 0 <= position < len(dimension.values):  # on along the better side while it pays
        candidate = best.with_value(dimension.name, dimension.values[position])
        if _pruned(space, candidate, log):
            break  # further along only uses more threads
        score = yield from score_of(candidate)
        if not better(score, best_score, min_gain):
            break
        best, best_score = candidate, score
        position += step
    return best, best_score


def _pruned(space: SearchSpace, candidate: Candidate, log: SearchLog) -> bool:
    reason = space.pruned(candidate)
    if reason is not None:
        log.pruned[candidate.name] = reason
    return reason is not None
