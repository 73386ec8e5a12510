"""The result of a tuning run as data: the Pareto front, the choice, the references, JSON.

JSON schema (`TuneResult.to_dict()`, `schema` = "attndeploy.tune/1"); latencies in ms,
throughput in inferences (rows or texts) per second, `null` where nothing was measured:

    {
      "schema": "attndeploy.tune/1",
      "partial": bool, "partial_reason": str | null,   # Ctrl-C: what was measured until then
      "target": {"repo", "model", "id_model", "text_model", "version", "onnx", "generic", "int8"},
      "options": {...},                                # TuneOptions, the search space included
      "started_at": str, "duration_s": float,
      "machine": {"cpu_count", "load_average_start": [1, 5, 15 min], "load_average_end"},
      "latency_budget_ms": float | null,
      "measurements": [{"name", "role",                # current | package_default | search |
                        "candidate": {...},            #   final | repeat
                        "levels": [{"concurrency", "throughput", "p50_ms", "p95_ms", "p99_ms",
                                    "avg_batch_size", "errors", "checks_done", "checks_failed",
                                    "stable"}],
                        "score", "best_concurrency",   # best throughput within the budget
                        "failure", "stopped", "duration_s", "notes"}],
      "search": {"method", "passes", "moves", "pruned", "stopped_because"},
      "pareto": [{"name", "concurrency", "throughput", "p95_ms"}],   # by p95, rising
      "chosen": {"name", "candidate", "concurrency", "throughput", "p95_ms", "chosen_on",
                 "configs": {model: config.pbtxt text}} | null,   # chosen_on: final, else
                                                                  #   the search's role
      "package_default": {"name", "candidate", "levels"} | null,
      "versus_default": [{"concurrency", "throughput_ratio", "chosen_p95_ms",
                          "default_p95_ms", "p95_not_higher"}],
      "stability": {"throughput", "chosen_on", "search_throughput", "repeat_throughput",
                    "relative_difference", "tolerance", "stable"} | null,
      "in_process": [{"batch_size", "throughput", "p50_ms", "calls", "workers", "threads",
                      "cores"}],                        # cores: CPU s per s, this process
      "served_vs_in_process": [{"concurrency", "batch_size", "served", "in_process", "ratio"}],
      "notes": [str],
      "applied": {...} | null                          # what --apply wrote
    }
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from attndeploy.fsutil import atomic_write_text
from attndeploy.serving.loadtest.report import finite_json
from attndeploy.serving.tune.in_process import InProcessPoint
from attndeploy.serving.tune.measure import FINAL, REPEAT, LevelPoint, Measurement
from attndeploy.serving.tune.options import TuneOptions
from attndeploy.serving.tune.space import Candidate
from attndeploy.serving.tune.target import TuneTarget

SCHEMA = "attndeploy.tune/1"


@dataclass(frozen=True)
class ParetoPoint:
    """One (candidate, concurrency) point no other point beats on both throughput and p95."""

    name: str
    concurrency: int
    throughput: float
    p95_ms: float

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "concurrency": self.concurrency,
                "throughput": self.throughput, "p95_ms": self.p95_ms}


def _searched(measurements: Iterable[Measurement]) -> list[Measurement]:
    """The measurements that compete (the chosen candidate's repeat is a check, not a rival)."""
    return [m for m in measurements if m.role != REPEAT]


def pareto_front(measurements: Iterable[Measurement]) -> list[ParetoPoint]:
    """Throughput against p95 over every good level of every candidate: the points with no
    other point at least as fast at no higher p95, by p95 rising."""
    points = sorted(((m, p) for m in _searched(measurements) for p in m.levels if p.ok),
                    key=lambda mp: (mp[1].p95_ms, -mp[1].throughput))
    front: list[ParetoPoint] = []
    for measurement, point in points:
        if not front or point.throughput > front[-1].throughput:
            front.append(ParetoPoint(measurement.candidate.name, point.concurrency,
                                     point.throughput, point.p95_ms))  # type: ignore[arg-type]
    return front


def choose(measurements: Iterable[Measurement], budget_ms: float | None) -> Measurement | None:
    """The candidate of highest throughput within the budget (ties: the lower p95); None when
    no candidate has a level within it."""
    scored = [(m, m.best(budget_ms)) for m in _searched(measurements)]
    kept = [(m, p) for m, p in scored if p is not None]
    if not kept:
        return None
    return max(kept, key=lambda mp: (mp[1].throughput, -mp[1].p95_ms))[0]  # type: ignore[operator]


def leaders(measurements: Iterable[Measurement], budget_ms: float | None, count: int
            ) -> list[Candidate]:
    """The `count` candidates of highest throughput within the budget, best first (each by its
    best measurement; ties: the lower p95): the finalists measured again after the search."""
    best: dict[Candidate, tuple[float, float]] = {}
    for measurement in _searched(measurements):
        point = measurement.best(budget_ms)
        if point is None:
            continue
        key = (point.throughput, -(point.p95_ms or 0.0))
        if key > best.get(measurement.candidate, (float("-inf"), 0.0)):
            best[measurement.candidate] = key
    return sorted(best, key=best.__getitem__, reverse=True)[:count]


def closest(measurements: Iterable[Measurement]) -> tuple[Measurement, LevelPoint] | None:
    """The good level of lowest p95 (what comes nearest a budget none meets)."""
    points = [(m, p) for m in _searched(measurements) for p in m.levels if p.ok]
    return min(points, key=lambda mp: (mp[1].p95_ms, -mp[1].throughput), default=None)


@dataclass(frozen=True)
class TuneResult:
    """A whole tuning run; see the module docstring for its JSON."""

    target: TuneTarget
    options: TuneOptions
    started_at: str
    duration_s: float
    measurements: tuple[Measurement, ...]
    package_default: Candidate
    chosen: Measurement | None = None
    chosen_configs: dict[str, str] = field(default_factory=dict)  # model -> config.pbtxt
    repeat: Measurement | None = None
    in_process: tuple[InProcessPoint, ...] = ()
    search: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    machine: dict[str, Any] = field(default_factory=dict)
    partial_reason: str | None = None
    applied: dict[str, Any] | None = None

    @property
    def partial(self) -> bool:
        return self.partial_reason is not None

    @property
    def budget_ms(self) -> float | None:
        return self.options.latency_budget_ms

    @property
    def default_measurement(self) -> Measurement | None:
        """The package default's measurement (the current one when they are the same)."""
        return next((m for m in _searched(self.measurements)
                     if m.candidate == self.package_default), None)

    @property
    def chosen_level(self) -> LevelPoint | None:
        return self.chosen.best(self.budget_ms) if self.chosen is not None else None

    def pareto(self) -> list[ParetoPoint]:
        return pareto_front(self.measurements)

    def search_throughput(self) -> float | None:
        """The chosen candidate's best throughput at the chosen level during the search (before
        the finalists were measured again): what the winner's curse inflates."""
        level = self.chosen_level
        if level is None:
            return None
        points = [m.at(level.concurrency) for m in self.measurements
                  if m.role not in (FINAL, REPEAT) and m.candidate == self.chosen.candidate]
        return max((p.throughput for p in points if p is not None and p.ok), default=None)

    def stability(self) -> dict[str, Any] | None:
        """The chosen candidate's repeat against the measurement it was chosen on (a
        finalist's fresh one, unless there was no time for it), at the chosen level."""
        level = self.chosen_level
        if level is None or self.repeat is None:
            return None
        body = {"throughput": level.throughput, "chosen_on": self.chosen.role,
                "search_throughput": self.search_throughput(), "repeat_throughput": None,
                "relative_difference": None, "tolerance": self.options.repeat_tolerance,
                "stable": False}
        again = self.repeat.at(level.concurrency)
        if again is None or not again.ok:
            return body
        difference = abs(again.throughput - level.throughput) / level.throughput
        return body | {"repeat_throughput": again.throughput, "relative_difference": difference,
                       "stable": difference <= self.options.repeat_tolerance}

    def versus_default(self) -> list[dict[str, Any]]:
        """The chosen candidate against the package default, level by level."""
        default = self.default_measurement
        if self.chosen is None or default is None:
            return []
        rows = []
        for point in self.chosen.levels:
            other = default.at(point.concurrency)
            if not point.ok or other is None or not other.ok or not other.throughput:
                continue
            rows.append({"concurrency": point.concurrency,
                         "throughput_ratio": point.throughput / other.throughput,
                         "chosen_p95_ms": point.p95_ms, "default_p95_ms": other.p95_ms,
                         "p95_not_higher": point.p95_ms <= other.p95_ms})  # type: ignore[operator]
        return rows

    def served_vs_in_process(self) -> list[dict[str, Any]]:
        """Each chosen level's throughput against in-process onnxruntime at the batch size
        the server formed there."""
        if self.chosen is None:
            return []
        by_batch = {point.batch_size: point for point in self.in_process}
        rows = []
        for point in self.chosen.levels:
            batch = in_process_batch(point)
            reference = by_batch.get(batch)
            if not point.ok or reference is None or not reference.throughput:
                continue
            rows.append({"concurrency": point.concurrency, "batch_size": batch,
                         "served": point.throughput, "in_process": reference.throughput,
                         "ratio": point.throughput / reference.throughput})
        return rows

    def with_applied(self, applied: dict[str, Any]) -> TuneResult:
        return replace(self, applied=applied)

    def to_dict(self) -> dict[str, Any]:
        budget = self.budget_ms
        chosen = None
        level = self.chosen_level
        if self.chosen is not None and level is not None:
            chosen = {"name": self.chosen.candidate.name,
                      "candidate": self.chosen.candidate.to_dict(),
                      "concurrency": level.concurrency, "throughput": level.throughput,
                      "p95_ms": level.p95_ms, "chosen_on": self.chosen.role,
                      "configs": dict(self.chosen_configs)}
        default = self.default_measurement
        body = {
            "schema": SCHEMA,
            "partial": self.partial,
            "partial_reason": self.partial_reason,
            "target": self.target.to_dict(),
            "options": self.options.to_dict(),
            "started_at": self.started_at,
            "duration_s": self.duration_s,
            "machine": self.machine,
            "latency_budget_ms": budget,
            "measurements": [m.to_dict(budget) for m in self.measurements],
            "search": self.search,
            "pareto": [p.to_dict() for p in self.pareto()],
            "chosen": chosen,
            "package_default": {"name": self.package_default.name,
                                "candidate": self.package_default.to_dict(),
                                "levels": [p.to_dict() for p in default.levels]
                                if default is not None else None},
            "versus_default": self.versus_default(),
            "stability": self.stability(),
            "in_process": [p.to_dict() for p in self.in_process],
            "served_vs_in_process": self.served_vs_in_process(),
            "notes": list(self.notes),
            "applied": self.applied,
        }
        return dict(finite_json(body))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def write_json(self, path: Path) -> Path:
        atomic_write_text(Path(path), self.to_json())
        return Path(path)


def in_process_batch(point: LevelPoint) -> int:
    """The batch size the server formed at a level, rounded (1 when unknown)."""
    return max(1, round(point.avg_batch_size or 1.0))
