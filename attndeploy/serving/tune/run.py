"""The whole run: `run_tune` measures the repository's configuration, the package default and
what the search proposes, inside the time budget, then measures the search's best candidates
again (the finalists), chooses among those fresh measurements, repeats the chosen candidate and
measures the in-process reference.

Why finalists. The search keeps the best of 10-20 noisy measurements, and the best of many is
biased upward (the winner's curse): on a shared machine the winner's number was up to 15 % above
what the same configuration measured again and again. A fresh measurement of each finalist is
free of that bias (but for the small one of choosing among `TuneOptions.finalists` of them), so
the chosen throughput, the comparison with the package default and the repeat's stability are
read on it. With no time left for the finalists, the choice falls back on the search's numbers
and a note says so.

Time. Before each candidate the run checks that the candidate (estimated by the longest
measurement so far, a priori by `TuneOptions.candidate_estimate_s`) still leaves time for the
finalists, the repeat of the chosen one and the in-process reference; when it does not, the
search stops ("time budget"). A budget shorter than one measurement at its longest (every window
of every level) is refused before anything starts.

Interrupts. Ctrl-C stops the run where it is: `on_partial` receives a result of what was
measured (marked partial, its best candidate as chosen, unrepeated), then the KeyboardInterrupt
propagates. Nothing is applied.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from attndeploy.errors import AttnDeployError, ConfigError, LoadTestError, ServerError
from attndeploy.serving.loadtest.inputs import read_text_file
from attndeploy.serving.packaging import model_config as cfgmod
from attndeploy.serving.server.binary import find_tritonserver
from attndeploy.serving.tune.configs import (
    can_batch_ragged,
    candidate_configs,
    package_default,
    read_candidate,
)
from attndeploy.serving.tune.in_process import InProcessPoint, measure_in_process
from attndeploy.serving.tune.measure import (
    CURRENT,
    FINAL,
    PACKAGE_DEFAULT,
    REPEAT,
    SEARCH,
    Measurement,
    measure_candidate,
    unchecked_note,
)
from attndeploy.serving.tune.options import TuneOptions
from attndeploy.serving.tune.progress import TuneProgress
from attndeploy.serving.tune.result import (
    TuneResult,
    choose,
    closest,
    in_process_batch,
    leaders,
)
from attndeploy.serving.tune.search import SearchLog, coordinate_search
from attndeploy.serving.tune.space import DIMENSION_ORDER, Candidate, SearchSpace
from attndeploy.serving.tune.target import TuneTarget, read_target

SEARCH_METHOD = ("coordinate hill climbing from the served configuration, one dimension at a "
                 "time (model analyzer's quick search, simplified)")


def _machine(load_start: tuple[float, ...]) -> dict[str, Any]:
    return {"cpu_count": os.cpu_count(), "load_average_start": list(load_start),
            "load_average_end": list(os.getloadavg())}


def _space_for(target: TuneTarget, space: SearchSpace) -> SearchSpace:
    if target.int8 is not None:
        space = space.with_int8()
    if not target.id_config.HasField("dynamic_batching") and not can_batch_ragged(target):
        # a generic model packaged without a batcher keeps none: no delay to tune
        space = replace(space, max_queue_delay_us=(0,), preferred=("none",))
    return space


def _none_within(measurements: list[Measurement], budget_ms: float | None,
                 concurrency: tuple[int, ...]) -> LoadTestError:
    nearest = closest(measurements)
    levels = ",".join(str(c) for c in concurrency)
    if nearest is None:
        failures = [m.failure for m in measurements if m.failure]
        reason = f": {failures[0]}" if failures else ""
        return LoadTestError(f"no candidate was measured without errors at concurrency {levels} "
                             f"({len(measurements)} tried){reason}; nothing was written")
    measurement, point = nearest
    return LoadTestError(
        f"no configuration kept p95 within {budget_ms:g} ms at concurrency {levels} "
        f"({len(measurements)} measured); the closest was {measurement.candidate.name} at "
        f"concurrency {point.concurrency}: p95 {point.p95_ms:.2f} ms, "
        f"{point.throughput:.0f} infer/s. Nothing was written; raise --latency-budget-ms or "
        "add a lower --concurrency level")


def run_tune(
    options: TuneOptions,
    *,
    progress: bool = True,
    on_partial: Callable[[TuneResult], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    measure: Callable[..., Measurement] | None = None,
    reference: Callable[..., InProcessPoint] | None = None,
) -> TuneResult:
    """Tune `options.model` (see the package docstring); return the result (never writes).

    Raises RepositoryError (the model is not in the repository or cannot be tuned here),
    ConfigError (a budget too short for one measurement), ServerError (no tritonserver, or
    the repository's own configuration cannot be served) and LoadTestError (a `text_file`
    line that cannot be sent, before any server starts; no candidate within the latency
    budget: the closest is named), each before anything is written.
    `measure` and `reference` measure a candidate and the in-process reference (default
    `measure_candidate` and `measure_in_process`; tests pass simulated ones).
    """
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t0 = clock()
    load_start = os.getloadavg()
    target = read_target(options.repo, options.model, options.int8)
    one = options.candidate_estimate_s(worst=True)
    if options.budget_s < one:
        raise ConfigError(
            f"a budget of {options.budget_minutes:g} min ({options.budget_s:.0f} s) is shorter "
            f"than one measurement (up to {one:.0f} s: a server start and "
            f"{len(options.concurrency)} level(s) of up to {options.max_windows} x "
            f"{options.window_s:g} s windows); give --budget-minutes "
            f"{max(0.1, round(2 * one / 60 + 0.05, 1)):g} or more")
    if options.text_file is not None:  # a file that cannot be sent fails now, in one line,
        read_text_file(options.text_file)  # not in every candidate's measurement
    find_tritonserver()  # no server binary: fail now, not at the first candidate
    run = _Run(target, options, started_at=started_at, load_start=load_start,
               elapsed=lambda: clock() - t0, measure=measure or measure_candidate,
               reference=reference or measure_in_process)
    workdir = options.workdir
    if workdir is None:
        workdir = Path(tempfile.mkdtemp(prefix="attndeploy-tune-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        with TuneProgress(progress, options.budget_s, run.elapsed) as bar:
            try:
                return run.run(workdir, bar)
            except KeyboardInterrupt:
                if on_partial is not None:
                    on_partial(run.result(choose(run.measurements, options.latency_budget_ms),
                                          partial_reason="interrupted"))
                raise
    finally:
        if options.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


class _Run:
    """The state of one run: what was measured, the search's log, the notes, the clock."""

    def __init__(self, target: TuneTarget, options: TuneOptions, *, started_at: str,
                 load_start: tuple[float, ...], elapsed: Callable[[], float],
                 measure: Callable[..., Measurement],
                 reference: Callable[..., InProcessPoint]) -> None:
        self.target, self.options = target, options
        self.started_at, self.load_start, self.elapsed = started_at, load_start, elapsed
        self.measure_fn, self.reference = measure, reference
        self.budget_ms = options.latency_budget_ms
        self.space = _space_for(target, options.space)
        self.current = read_candidate(target.id_config, target.text_config)
        self.default = package_default(target)
        self.settings = options.settings()
        self.measurements: list[Measurement] = []
        self.notes: list[str] = []
        self.log = SearchLog()
        self.stopped_because = ""
        if not target.id_config.HasField("dynamic_batching") and can_batch_ragged(target):
            self.notes.append(f"{target.id_model} has no dynamic batcher; every candidate, the "
                              "current one included, was measured with it on")
        if len(options.seq_lengths) > 1 and options.text_file is None:
            self.notes.append(f"the in-process reference runs seq {options.seq_lengths[0]} only")

    # ---- time
    def estimate(self) -> float:
        """Seconds of the next candidate: the longest measurement so far, else a priori."""
        done = [m.duration_s for m in self.measurements if m.failure is None]
        return max(done) if done else self.options.candidate_estimate_s()

    def fits(self, after: float) -> bool:
        """Whether one more candidate, then `after` seconds more, end within the budget."""
        return self.elapsed() + self.estimate() + after <= self.options.budget_s

    def reserve(self) -> float:
        """What the end needs: the finalists' second measurements, the repeat of the chosen
        candidate and the in-process reference."""
        return ((self.options.finalists + 1) * self.estimate()
                + self.options.in_process_estimate_s())

    # ---- steps
    def measure(self, candidate: Candidate, role: str, bar: TuneProgress, workdir: Path
                ) -> Measurement:
        bar.candidate(candidate, role)
        measurement = self.measure_fn(self.target, candidate, self.settings, workdir, role=role,
                                      on_level=bar.level)
        self.measurements.append(measurement)
        bar.done(measurement, choose(self.measurements, self.budget_ms), self.budget_ms)
        return measurement

    def run(self, workdir: Path, bar: TuneProgress) -> TuneResult:
        first = self.measure(self.current, CURRENT, bar, workdir)
        if first.failure is not None:
            raise ServerError(f"the repository's own configuration of {self.target.model} "
                              f"could not be measured: {first.failure}")
        known = {self.current: first.score(self.budget_ms)}
        if self.default != self.current:
            if self.fits(self.reserve()):
                known[self.default] = self.measure(self.default, PACKAGE_DEFAULT, bar,
                                                   workdir).score(self.budget_ms)
            else:
                self.notes.append("no time left to measure the package default")
        self.search(known, bar, workdir)
        leader = choose(self.measurements, self.budget_ms)
        if leader is None:
            raise _none_within(self.measurements, self.budget_ms, self.options.concurrency)
        chosen = self.finals(bar, workdir) or leader
        self.notes.extend(f"the chosen {chosen.candidate.name}: {note}" for note in unchecked_note(
            self.target, chosen.candidate, list(chosen.levels), self.options.check_fraction))
        repeat = None
        if self.fits(self.options.in_process_estimate_s()):
            repeat = self.measure(chosen.candidate, REPEAT, bar, workdir)
        else:
            self.notes.append("no time left to measure the chosen configuration again")
        bar.note("in-process onnxruntime reference")
        in_process = _in_process(self.target, chosen, self.options, self.reference, self.notes,
                                 lambda: self.elapsed() <= self.options.budget_s)
        return self.result(chosen, repeat=repeat, in_process=in_process)

    def finals(self, bar: TuneProgress, workdir: Path) -> Measurement | None:
        """The search's best candidates measured again, best first, while time leaves the
        repeat and the in-process reference; the best of these fresh measurements (None: no
        time for any, or none kept the latency budget, noted either way)."""
        measured: list[Measurement] = []
        after = self.estimate() + self.options.in_process_estimate_s()
        for candidate in leaders(self.measurements, self.budget_ms, self.options.finalists):
            if not self.fits(after):
                self.notes.append(f"no time left to measure the finalist {candidate.name} again")
                break
            measured.append(self.measure(candidate, FINAL, bar, workdir))
        chosen = choose(measured, self.budget_ms)
        if not measured:
            self.notes.append("the choice rests on the search's measurements, which favour a "
                              "lucky one; give more --budget-minutes for the finalists")
        elif chosen is None:
            self.notes.append("no finalist kept the latency budget when measured again; the "
                              "choice rests on the search's measurements")
        return chosen

    def search(self, known: dict[Candidate, float | None], bar: TuneProgress, workdir: Path
               ) -> None:
        """Measure what the coordinate search proposes until it converges or time runs out."""
        search = coordinate_search(self.space, self.current, known,
                                   min_gain=self.options.min_gain, log=self.log)
        try:
            candidate = next(search)
            while True:
                if not self.fits(self.reserve()):
                    self.stopped_because = "time budget"
                    return
                measurement = self.measure(candidate, SEARCH, bar, workdir)
                candidate = search.send(measurement.score(self.budget_ms))
        except StopIteration:
            self.stopped_because = "converged: a whole pass moved nowhere"

    def result(self, chosen: Measurement | None, *, repeat: Measurement | None = None,
               in_process: tuple[InProcessPoint, ...] = (),
               partial_reason: str | None = None) -> TuneResult:
        configs = {}
        if chosen is not None:
            configs = {name: cfgmod.serialize_config(cfg) for name, cfg
                       in candidate_configs(self.target, chosen.candidate).items()}
        return TuneResult(
            target=self.target, options=self.options, started_at=self.started_at,
            duration_s=self.elapsed(), measurements=tuple(self.measurements),
            package_default=self.default, chosen=chosen, chosen_configs=configs,
            repeat=repeat, in_process=in_process,
            search={"method": SEARCH_METHOD, "dimension_order": list(DIMENSION_ORDER),
                    "space": self.space.to_dict(), "passes": self.log.passes,
                    "moves": list(self.log.moves), "pruned": dict(self.log.pruned),
                    "stopped_because": self.stopped_because},
            notes=tuple(self.notes), machine=_machine(self.load_start),
            partial_reason=partial_reason,
        )


def _in_process(target: TuneTarget, chosen: Measurement, options: TuneOptions,
                reference: Callable[..., InProcessPoint], notes: list[str],
                time_left: Callable[[], bool]) -> tuple[InProcessPoint, ...]:
    """In-process onnxruntime at each batch size the server formed for the chosen candidate."""
    if target.generic:
        notes.append("no in-process reference for a generic model (its inputs are its own)")
        return ()
    candidate = chosen.candidate
    sizes = sorted({in_process_batch(p) for p in chosen.levels if p.ok})
    points = []
    for size in sizes:
        if not time_left():
            notes.append(f"no time left for the in-process reference at batch {size}")
            continue
        try:
            points.append(reference(
                target.onnx_for(candidate.precision), text=target.text_model is not None,
                batch_size=size, seq=options.seq_lengths[0], threads=candidate.threads,
                workers=candidate.instances, seconds=options.in_process_seconds,
                seed=options.seed, text_file=options.text_file))
        except AttnDeployError as exc:
            notes.append(f"the in-process reference at batch {size} failed: {exc}")
    return tuple(points)

