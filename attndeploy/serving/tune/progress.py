"""The tuning run's progress bar on stderr: the time budget spent, the candidate being measured,
its last level, and the best candidate so far (rich; silent when disabled or when stderr is not
a terminal, where rich would print its last frame at the end, a second line beside an error)."""

from __future__ import annotations

from typing import Any

from attndeploy.serving.tune.measure import LevelPoint, Measurement
from attndeploy.serving.tune.space import Candidate


class TuneProgress:
    """`with TuneProgress(enabled, budget_s, clock) as bar: bar.candidate(...) ...`"""

    def __init__(self, enabled: bool, budget_s: float, elapsed: Any) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn

        self.elapsed = elapsed  # () -> seconds since the run began
        self.budget_s = budget_s
        console = Console(stderr=True)
        self.bar = Progress(
            TextColumn("{task.description}"), BarColumn(),
            TextColumn("{task.fields[clock]}"), TextColumn("{task.fields[info]}"),
            console=console, disable=not enabled or not console.is_terminal,
        )
        self.task: Any = None
        self.count = 0
        self.best = ""

    def __enter__(self) -> TuneProgress:
        self.bar.__enter__()
        self.task = self.bar.add_task("tuning", total=self.budget_s, clock="", info="")
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.__exit__(None, None, None)

    def _clock(self) -> str:
        spent = self.elapsed()
        return f"{spent / 60:4.1f}/{self.budget_s / 60:.1f} min"

    def _update(self, info: str) -> None:
        spent = min(self.elapsed(), self.budget_s)
        self.bar.update(self.task, completed=spent, clock=self._clock(), info=info)

    def candidate(self, candidate: Candidate, role: str) -> None:
        self.count += 1
        self.current = f"#{self.count} {candidate.name} ({role.replace('_', ' ')})"
        self._update(self.current + self.best)

    def level(self, point: LevelPoint) -> None:
        p95 = f"{point.p95_ms:.1f} ms" if point.p95_ms is not None else "-"
        self._update(f"{self.current} c{point.concurrency}: {point.throughput:.0f}/s "
                     f"p95 {p95}{self.best}")

    def done(self, measurement: Measurement, best: Measurement | None,
             budget_ms: float | None) -> None:
        if best is not None and best.score(budget_ms) is not None:
            self.best = f" | best {best.score(budget_ms):.0f}/s {best.candidate.name}"
        self._update(f"{self.current} done{self.best}")

    def note(self, text: str) -> None:
        self._update(text + self.best)
