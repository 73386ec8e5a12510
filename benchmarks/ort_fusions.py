"""What onnxruntime's optional graph fusions cost or save on our files (issue #55): each model
run with every fusion, as a plain `onnxruntime.InferenceSession` does (and the Triton server),
against the same with `--disable` left out (default SkipLayerNormFusion, what
`attndeploy.runtime.sessions.SLOWER_FUSIONS` leaves out of every in-process session).

Random token ids, no padding, `--threads` intra-op threads, spinning off; the two sessions of a
model alternate call by call (interleaved), `--rounds` calls each per shape after a tenth as
warm-up; the median CPU time of the process per call (all threads), so a busy machine changes
the minutes, not the ratio. Also the largest output difference between the two sessions.
Writes OUT/ort_fusions.json: per model and shape the ms with every fusion, the ratio without /
with (below 1: leaving the fusion out is faster) and the difference.

Run: `.venv/bin/python benchmarks/ort_fusions.py NAME=MODEL.onnx ... [--shapes
1x16,1x32,8x32,8x128] [--threads 2] [--rounds 60] [--disable SkipLayerNormFusion]
[--out benchmarks/results]` (an encoder's export: `input_ids`, `attention_mask`,
`token_type_ids` if it has one).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attndeploy.fsutil import atomic_write_text  # noqa: E402
from attndeploy.runtime.sessions import create_session  # noqa: E402


def feeds(session, batch: int, seq: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    ids = rng.integers(1000, 20000, (batch, seq)).astype(np.int64)
    out = {}
    for spec in session.get_inputs():
        if "mask" in spec.name:
            out[spec.name] = np.ones((batch, seq), np.int64)
        elif "type" in spec.name:
            out[spec.name] = np.zeros((batch, seq), np.int64)
        else:
            out[spec.name] = ids
    return out


def compare(path: Path, shapes: list[tuple[int, int]], threads: int, rounds: int,
            disabled: list[str]) -> dict:
    settings = {"threads": threads, "spinning": False}
    sessions = {"every": create_session(path, disabled_fusions=(), **settings),
                "without": create_session(path, disabled_fusions=disabled, **settings)}
    rng = np.random.default_rng(0)
    rows = {}
    for batch, seq in shapes:
        feed = feeds(sessions["every"], batch, seq, rng)
        count = max(4, rounds * 128 // max(batch * seq // 8, 16))  # fewer calls for big shapes
        times: dict[str, list[float]] = {name: [] for name in sessions}
        for _ in range(count + count // 10):
            for name, session in sessions.items():
                started = time.process_time()
                session.run(None, feed)
                times[name].append(time.process_time() - started)
        median = {name: float(np.median(t[count // 10:])) for name, t in times.items()}
        outputs = {name: session.run(None, feed)[0] for name, session in sessions.items()}
        rows[f"{batch}x{seq}"] = {
            "ms_every_fusion": round(median["every"] * 1000, 3),
            "ms_without": round(median["without"] * 1000, 3),
            "ratio_without": round(median["without"] / median["every"], 3),
            "max_abs_difference": float(np.abs(outputs["every"] - outputs["without"]).max()),
            "calls": count}
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", help="NAME=PATH of each ONNX file")
    parser.add_argument("--shapes", default="1x16,1x32,8x32,8x128")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--disable", default="SkipLayerNormFusion",
                        help="comma-separated onnxruntime optimizer names")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args(argv)
    models = {}
    for item in args.models:
        name, sep, path = item.partition("=")
        if not sep or not Path(path).is_file():
            parser.error(f"{item!r}: give NAME=PATH of an existing ONNX file")
        models[name] = Path(path)
    shapes = [tuple(int(n) for n in shape.split("x")) for shape in args.shapes.split(",")]
    disabled = args.disable.split(",")
    report = {"disabled": disabled, "threads": args.threads, "clock": "process CPU time",
              "load_average_before": os.getloadavg(), "models": {}}
    for name, path in models.items():
        report["models"][name] = compare(path, shapes, args.threads, args.rounds, disabled)
        ratios = {shape: row["ratio_without"] for shape, row in report["models"][name].items()}
        print(f"{name}: without / every fusion {ratios}", flush=True)
    report["load_average_after"] = os.getloadavg()
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "ort_fusions.json", json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
