"""Is an optimized model faster than its input? Both timed on a shape grid, interleaved, and
judged (`attndeploy.optimize`'s second test, after parity).

`time_on_grid` runs each model with one intra-op thread and counts the calling thread's CPU
time, which a loaded machine disturbs less than the wall clock; `judge_speed` calls the
optimized model faster when the geometric mean of its time ratios is at most
1 - `FASTER_MARGIN` and no shape is more than `SLOWER_SLACK` slower.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx

# (batch, seq) of the timing grid (issue #55's), seq clipped to what the model takes
GRID = ((1, 16), (1, 32), (8, 32), (8, 128), (32, 128))
TIMING_ROUNDS, TIMING_CALLS = 5, 3
FASTER_MARGIN = 0.01  # faster: the geometric mean of the time ratios at most 1 - this
SLOWER_SLACK = 0.05  # a shape this much slower refuses the model even at a faster mean


def session_of(model: onnx.ModelProto | Path, threads: int = 0) -> Any:
    from attndeploy.runtime.sessions import create_session

    # errors-only logging: float16 graphs log harmless constant-folding warnings
    return create_session(model, threads=threads or None)


def time_on_grid(original: Path, optimized: onnx.ModelProto,
                 feeds: Mapping[str, dict[str, np.ndarray]], rounds: int = TIMING_ROUNDS
                 ) -> dict[str, Any]:
    """Load time of both models and the CPU time of a run at every grid shape, in ms: one
    intra-op thread (the calling thread runs the model: `thread_time` counts its work alone,
    which a loaded machine disturbs less than the wall clock), both models interleaved in a
    fresh random order each round, `TIMING_CALLS` calls a round after one warm-up call; the
    median over the rounds of each round's median. {"load_ms": {model: ms},
    "run_ms": {shape: {model: ms}}}."""
    models: dict[str, onnx.ModelProto | Path] = {"input": original, "optimized": optimized}
    sessions, load_ms = {}, {}
    for name, model in models.items():
        started = time.perf_counter()
        sessions[name] = session_of(model, threads=1)
        load_ms[name] = round((time.perf_counter() - started) * 1e3, 3)
    rng = np.random.default_rng(0)
    samples: dict[str, dict[str, list[float]]] = {s: {n: [] for n in sessions} for s in feeds}
    for feed in feeds.values():
        for session in sessions.values():
            session.run(None, feed)  # warm-up
    for _ in range(rounds):
        for shape, feed in feeds.items():
            for name in rng.permutation(list(sessions)):
                calls = []
                for _ in range(TIMING_CALLS):
                    started = time.thread_time()
                    sessions[name].run(None, feed)
                    calls.append((time.thread_time() - started) * 1e3)
                samples[shape][name].append(statistics.median(calls))
    run_ms = {shape: {n: round(statistics.median(v), 4) for n, v in by_name.items()}
              for shape, by_name in samples.items()}
    return {"load_ms": load_ms, "run_ms": run_ms}


def judge_speed(run_ms: Mapping[str, Mapping[str, float]]) -> dict[str, Any]:
    """The optimized model's time over the input's at each shape (`ratio`), their geometric
    mean, and whether it is faster on the grid: a geometric mean at most 1 - `FASTER_MARGIN`
    (a model within the timing's noise of its input is not called faster), no shape more
    than `SLOWER_SLACK` slower."""
    ratios = {shape: t["optimized"] / t["input"] if t["input"] > 0 else 1.0
              for shape, t in run_ms.items()}
    geomean = math.exp(statistics.fmean(math.log(max(r, 1e-9)) for r in ratios.values()))
    faster = geomean <= 1.0 - FASTER_MARGIN and all(r <= 1.0 + SLOWER_SLACK
                                                     for r in ratios.values())
    return {"ratio": {s: round(r, 4) for s, r in ratios.items()},
            "geomean_ratio": round(geomean, 4), "faster": faster}


def speed_summary(speed: Mapping[str, Any]) -> str:
    shapes = ", ".join(f"{s} {r:.2f}x" for s, r in speed["ratio"].items())
    return (f"{shapes}; geometric mean {speed['geomean_ratio']:.3f}x the input's CPU time, "
            f"one thread")
