"""Tuning: `attndeploy tune` on any packaged repository, then its targets checked side by side.

What it answers: does the configuration the tuner chooses beat the package default, how close
does the server come to in-process onnxruntime, and does the choice hold up when measured again?

Targets (benchmarks/README.md, "tune.py"):

1. the tuned throughput at concurrency 16 is at least 1.3x the package default's, at equal or
   lower p95;
2. the served throughput is at least 0.8x in-process onnxruntime at the same batch size (the
   server's overhead ceiling, measured side by side);
3. the tuned configuration is stable: a second measurement lands within 10 %.

How:

1. *Tune*: `run_tune(TuneOptions(...))`, as `attndeploy tune` runs it (the search space, its
   budget, the latency budget, `--int8`); its whole JSON is kept under `tune`.
2. *Verify*: `--rounds` rounds; each round measures the package default and the chosen
   configuration in a fresh random order (each a scratch repository served by a fresh
   tritonserver, every one of `--levels` measured, no early stop), and right after the chosen
   one, in-process onnxruntime at the batch size the server formed for it at concurrency
   `TARGET_LEVEL` (its instances as threads, its intra-op thread count each). On a shared
   machine the background load drifts by tens of percent within minutes, so each verdict is a
   median over rounds of ratios taken within one round (`paired`); ratios of medians are
   reported beside them.
   Target 1: the median paired throughput ratio at `TARGET_LEVEL` >= 1.3 and the chosen
   configuration's median p95 there <= the default's. Target 2: the median paired ratio served /
   in-process >= 0.8. Target 3: the tuner's own repeat of the chosen configuration within 10 % of
   the measurement it was chosen on (its finalist measurement, made after the search), and
   every verification round's throughput within 10 % of their median.
   Beside target 2 (not a target): the CPU the server's processes (tritonserver and the python
   backend's stubs) and the load tester used during the chosen configuration's level 16, read
   from /proc between the level's first and last window edges (its steady state: the load
   tester's setup, when the server idles, is outside), and served texts per server CPU second
   against in-process texts per CPU second.
   On a machine where the load tester shares the cores, this separates the server's own
   overhead from the cores the client takes.
3. The load average is recorded at the start, after tuning and at the end: read the numbers
   against it.

Run: `.venv/bin/python benchmarks/tune.py --repo REPO --model NAME [--latency-budget-ms P95]
[--budget-minutes 10] [--concurrency 1,4,16,64] [--int8 Q.onnx] [--rounds 3] [--levels 1,16]
[--window-s 2] [--text-file TEXTS] [--quick] [--out DIR]`. Writes DIR/tune.json and
DIR/tune.png (DIR defaults to benchmarks/results/). `--quick`: a 3-minute budget, 2 rounds,
1-second windows.
Quickstart-like model: `attndeploy train --variant standard --dataset sparse_evidence --out
/tmp/tune/ckpt`, `attndeploy package /tmp/tune/ckpt --repo /tmp/tune/repo`, then
`--repo /tmp/tune/repo --model ckpt_text` (the text model and its id model) or `--model ckpt`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python benchmarks/tune.py` from a checkout
    sys.path.insert(0, str(ROOT))

from attndeploy.fsutil import atomic_write_png, atomic_write_text  # noqa: E402
from attndeploy.serving.tune import TuneOptions, run_tune  # noqa: E402
from attndeploy.serving.tune.in_process import measure_in_process  # noqa: E402
from attndeploy.serving.tune.measure import Measurement, measure_candidate  # noqa: E402
from attndeploy.serving.tune.result import TuneResult, in_process_batch  # noqa: E402

TARGET_LEVEL = 16
SPEEDUP_TARGET = 1.3  # target 1
IN_PROCESS_TARGET = 0.8  # target 2
STABILITY_TARGET = 0.10  # target 3


def _median(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return float(statistics.median(kept)) if kept else None


SERVER_PROCESSES = ("tritonserver", "triton_python_backend_stub")  # its stubs run the models


def _cpu_seconds() -> dict[str, float]:
    """CPU seconds (user + system) so far of this process (the load tester and its gRPC
    threads) and of every server process (tritonserver and the python backend's stubs; one
    server runs at a time here), read from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {"client": 0.0, "server": 0.0}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            command = (entry / "cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace")
        except OSError:
            continue  # gone meanwhile
        seconds = (int(fields[11]) + int(fields[12])) / tick  # utime + stime
        if int(entry.name) == os.getpid():
            out["client"] += seconds
        elif any(name in Path(command).name for name in SERVER_PROCESSES):
            out["server"] += seconds
    return out


class LevelCpu:
    """The cores the server and the load tester used in the steady state of one concurrency
    level: from its first window's close to its last (after warm-up, before the answers'
    checks; the load tester's setup, which reads and tokenizes the texts while the server
    idles, is outside). `window` is measure_candidate's `on_window` callback and `level` its
    `on_level`; each reads /proc."""

    def __init__(self, level: int) -> None:
        self.level = level
        self.pending: list[tuple[float, dict[str, float]]] = []  # the level in progress
        self.marks: list[tuple[float, dict[str, float]]] = []  # `level`'s window edges

    def window(self, stats: Any) -> None:
        self.pending.append((time.perf_counter(), _cpu_seconds()))

    def level_done(self, point: Any) -> None:
        if point.concurrency == self.level:
            self.marks = self.pending
        self.pending = []

    def cores(self) -> dict[str, float] | None:
        """{"server", "client", "seconds"}: mean cores busy between `level`'s first and last
        window edges; None with fewer than two windows or the level not reached."""
        if len(self.marks) < 2:
            return None
        (t0, before), (t1, after) = self.marks[0], self.marks[-1]
        return {**{name: (after[name] - before[name]) / (t1 - t0) for name in before},
                "seconds": t1 - t0}


def _level(measurement: Measurement, concurrency: int) -> dict[str, Any] | None:
    point = measurement.at(concurrency)
    return point.to_dict() if point is not None and point.ok else None


def verify(result: TuneResult, args: argparse.Namespace, log: Any) -> list[dict[str, Any]]:
    """`args.rounds` rounds of default and chosen, fresh servers, in random order each."""
    chosen = result.chosen.candidate
    default = result.package_default
    # every level measured (the chosen one's own included): no latency budget, and no stop on
    # a small gain (a gain of -100 % is never missed)
    levels = sorted({*args.levels, result.chosen_level.concurrency})
    args.levels = levels
    settings = replace(result.options.settings(), concurrency=tuple(levels),
                       latency_budget_ms=None, min_level_gain=-1.0)
    rng = random.Random(args.seed)
    rounds = []
    with tempfile.TemporaryDirectory(prefix="attndeploy-tune-bench-") as work:
        for index in range(args.rounds):
            order = [("default", default), ("chosen", chosen)]
            rng.shuffle(order)
            row: dict[str, Any] = {"round": index, "order": [name for name, _ in order],
                                   "load_average": list(os.getloadavg())}
            for name, candidate in order:
                cpu = LevelCpu(TARGET_LEVEL)
                measurement = measure_candidate(result.target, candidate, settings, Path(work),
                                                role=name, on_level=cpu.level_done,
                                                on_window=cpu.window)
                row[name] = {"failure": measurement.failure, "notes": list(measurement.notes),
                             "levels": {str(c): _level(measurement, c) for c in args.levels}}
                log(f"round {index} {name:>7} {candidate.name}: " + ", ".join(
                    f"c{c} {p['throughput']:.0f}/s p95 {p['p95_ms']:.2f} ms"
                    for c, p in ((c, _level(measurement, c)) for c in args.levels) if p))
                if name == "chosen":
                    point = measurement.at(TARGET_LEVEL)
                    batch = in_process_batch(point) if point is not None else 1
                    reference = measure_in_process(
                        result.target.onnx_for(candidate.precision),
                        text=result.target.text_model is not None, batch_size=batch,
                        seq=result.options.seq_lengths[0], threads=candidate.threads,
                        workers=candidate.instances, seconds=args.in_process_s,
                        seed=args.seed, text_file=result.options.text_file)
                    row["in_process"] = reference.to_dict()
                    row["chosen"]["cores"] = cpu.cores()
                    log(f"round {index} in-process at batch {batch}: "
                        f"{reference.throughput:.0f}/s")
            rounds.append(row)
    return rounds


def _at(row: dict[str, Any], name: str, key: str, level: int = TARGET_LEVEL) -> float | None:
    point = (row.get(name) or {}).get("levels", {}).get(str(level))
    return point[key] if point else None


def targets(result: TuneResult, rounds: list[dict[str, Any]]) -> dict[str, Any]:
    paired = [c / d for row in rounds
              if (c := _at(row, "chosen", "throughput")) and (d := _at(row, "default",
                                                                        "throughput"))]
    chosen_tp = [_at(row, "chosen", "throughput") for row in rounds]
    default_tp = [_at(row, "default", "throughput") for row in rounds]
    chosen_p95 = _median([_at(row, "chosen", "p95_ms") for row in rounds])
    default_p95 = _median([_at(row, "default", "p95_ms") for row in rounds])
    speedup = _median(paired)
    served = [(c / row["in_process"]["throughput"]) for row in rounds
              if (c := _at(row, "chosen", "throughput")) and row.get("in_process")]
    ratio = _median(served)
    median_chosen = _median(chosen_tp)
    spread = (max(abs(t - median_chosen) / median_chosen for t in chosen_tp if t)
              if median_chosen else None)
    per_core = [(c / cores["server"]) / (row["in_process"]["throughput"]
                                         / row["in_process"]["cores"])
                for row in rounds
                if (c := _at(row, "chosen", "throughput")) and row.get("in_process")
                and (cores := row["chosen"].get("cores")) and cores["server"] > 0
                and row["in_process"]["cores"] > 0]
    client_cores = _median([(row["chosen"].get("cores") or {}).get("client") for row in rounds])
    server_cores = _median([(row["chosen"].get("cores") or {}).get("server") for row in rounds])
    repeat = result.stability()
    repeat_diff = repeat["relative_difference"] if repeat else None
    level = result.chosen_level.concurrency
    at_level = [c / d for row in rounds if (c := _at(row, "chosen", "throughput", level))
                and (d := _at(row, "default", "throughput", level))]
    return {
        "speedup_vs_default": {
            "level": TARGET_LEVEL, "paired_median": speedup, "per_round": paired,
            "ratio_of_medians": (median_chosen / _median(default_tp)
                                 if median_chosen and _median(default_tp) else None),
            "chosen_p95_ms": chosen_p95, "default_p95_ms": default_p95,
            "target": f">= {SPEEDUP_TARGET} at equal or lower p95",
            "met": bool(speedup and speedup >= SPEEDUP_TARGET and chosen_p95 is not None
                        and default_p95 is not None and chosen_p95 <= default_p95)},
        "speedup_at_the_chosen_level": {
            "level": level, "paired_median": _median(at_level), "per_round": at_level,
            "chosen_p95_ms": _median([_at(row, "chosen", "p95_ms", level) for row in rounds]),
            "default_p95_ms": _median([_at(row, "default", "p95_ms", level) for row in rounds]),
            "note": "not a target: the level the tuner chose the configuration for"},
        "served_vs_in_process": {
            "level": TARGET_LEVEL, "paired_median": ratio, "per_round": served,
            "target": f">= {IN_PROCESS_TARGET}",
            "met": bool(ratio and ratio >= IN_PROCESS_TARGET)},
        "served_vs_in_process_per_core": {
            "level": TARGET_LEVEL, "paired_median": _median(per_core), "per_round": per_core,
            "server_cores": server_cores, "client_cores": client_cores,
            "in_process_cores": _median([(row.get("in_process") or {}).get("cores")
                                         for row in rounds]),
            "note": "not a target: texts per CPU second of the server's processes against "
                    "in-process onnxruntime's, so the load tester's share of the cores is "
                    "left out (the server's own overhead)"},
        "stability": {
            "tuner_repeat_difference": repeat_diff, "rounds_max_deviation": spread,
            "tuner_chosen_on": repeat["chosen_on"] if repeat else None,
            "tuner_search_throughput": repeat["search_throughput"] if repeat else None,
            "tuner_chosen_throughput": repeat["throughput"] if repeat else None,
            "target": f"<= {STABILITY_TARGET}",
            "met": (repeat_diff is not None and repeat_diff <= STABILITY_TARGET
                    and spread is not None and spread <= STABILITY_TARGET)},
    }


def plot(report: dict[str, Any], result: TuneResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5))
    points = [(p["throughput"], p["p95_ms"]) for m in report["tune"]["measurements"]
              if m["role"] != "repeat" for p in m["levels"]
              if p["p95_ms"] is not None and not p["errors"]]
    left.scatter([x for x, _ in points], [y for _, y in points], s=12, color="0.6",
                 label="measured (candidate, concurrency)")
    front = report["tune"]["pareto"]
    left.plot([p["throughput"] for p in front], [p["p95_ms"] for p in front], "o-",
              color="tab:blue", label="Pareto front")
    chosen = report["tune"]["chosen"]
    left.plot([chosen["throughput"]], [chosen["p95_ms"]], "*", color="tab:red", markersize=15,
              label=f"chosen {chosen['name']} (c{chosen['concurrency']})")
    default = report["tune"]["package_default"]
    default_levels = [p for p in default["levels"] or [] if p["p95_ms"] is not None]
    left.plot([p["throughput"] for p in default_levels], [p["p95_ms"] for p in default_levels],
              "s--", color="tab:orange", label=f"package default {default['name']}")
    if result.budget_ms is not None:
        left.axhline(result.budget_ms, color="k", linestyle=":", label="p95 budget")
    left.set_yscale("log")
    left.set_xlabel("throughput (inferences/s)")
    left.set_ylabel("p95 (ms)")
    left.set_title(f"tune: {report['tune']['target']['model']}, "
                   f"{len(report['tune']['measurements'])} measurements", fontsize=10)
    left.grid(alpha=0.3)
    left.legend(fontsize=7)

    rounds = report["rounds"]
    x = range(len(rounds))
    for offset, (name, color) in enumerate((("default", "tab:orange"), ("chosen", "tab:red"))):
        right.bar([i + (offset - 1) * 0.27 for i in x],
                  [_at(row, name, "throughput") or 0 for row in rounds], 0.27, color=color,
                  label=f"{name} c{TARGET_LEVEL}")
    right.bar([i + 0.27 for i in x], [(row.get("in_process") or {}).get("throughput", 0)
                                      for row in rounds], 0.27, color="tab:green",
              label="in-process onnxruntime, chosen's batch size")
    right.set_xticks(list(x), [f"round {i}" for i in x])
    right.set_ylabel("throughput (inferences/s)")
    t = report["targets"]
    right.set_title(f"verification: {t['speedup_vs_default']['paired_median'] or 0:.2f}x the "
                    f"default, {t['served_vs_in_process']['paired_median'] or 0:.2f}x in-process",
                    fontsize=10)
    right.legend(fontsize=7)
    fig.suptitle(f"{report['machine']['cpu_count']} cores, load average "
                 f"{report['machine']['load_average_start'][0]:.1f} at the start, "
                 f"{report['load_average_end'][0]:.1f} at the end", fontsize=9)
    fig.tight_layout()
    atomic_write_png(fig, path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--latency-budget-ms", type=float, default=None)
    parser.add_argument("--budget-minutes", type=float, default=None)
    parser.add_argument("--concurrency", default="1,4,16,64")
    parser.add_argument("--int8", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--levels", default=f"1,{TARGET_LEVEL}",
                        help="verification levels (must hold 16)")
    parser.add_argument("--window-s", type=float, default=None)
    parser.add_argument("--in-process-s", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--text-file", type=Path, default=None,
                        help="texts, one per line, sent instead of random words (a text model)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()
    args.levels = [int(c) for c in args.levels.split(",")]
    if TARGET_LEVEL not in args.levels:
        raise SystemExit(f"--levels must include {TARGET_LEVEL} (the targets use it)")
    args.budget_minutes = args.budget_minutes or (3.0 if args.quick else 10.0)
    args.rounds = args.rounds or (2 if args.quick else 3)
    args.window_s = args.window_s or (1.0 if args.quick else 2.0)
    args.out.mkdir(parents=True, exist_ok=True)

    from rich.console import Console

    log = Console(stderr=True).log
    started = time.perf_counter()
    load_start = list(os.getloadavg())
    options = TuneOptions(repo=args.repo, model=args.model,
                          latency_budget_ms=args.latency_budget_ms,
                          concurrency=tuple(int(c) for c in args.concurrency.split(",")),
                          budget_minutes=args.budget_minutes, int8=args.int8,
                          window_s=args.window_s, seed=args.seed, text_file=args.text_file)
    result = run_tune(options, progress=True)
    tune_s = time.perf_counter() - started
    load_after_tune = list(os.getloadavg())
    log(f"tuned in {tune_s / 60:.1f} min: chosen {result.chosen.candidate.name}; verifying")
    rounds = verify(result, args, log)
    report = {
        "benchmark": "tune",
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": {"platform": platform.platform(), "python": sys.version.split()[0],
                    "cpu_count": os.cpu_count(), "load_average_start": load_start},
        "settings": {"levels": args.levels, "rounds": args.rounds,
                     "in_process_s": args.in_process_s, "target_level": TARGET_LEVEL},
        "targets": targets(result, rounds),
        "rounds": rounds,
        "tune": result.to_dict(),
        "timings_s": {"tune": round(tune_s, 1),
                      "total": round(time.perf_counter() - started, 1)},
        "load_average_after_tune": load_after_tune,
        "load_average_end": list(os.getloadavg()),
    }
    atomic_write_text(args.out / "tune.json", json.dumps(report, indent=2, default=str) + "\n")
    plot(report, result, args.out / "tune.png")
    for name, target in report["targets"].items():
        print(f"{name}: {json.dumps({k: v for k, v in target.items() if k != 'per_round'})}")
    print(f"wrote {args.out / 'tune.json'} and {args.out / 'tune.png'}")


if __name__ == "__main__":
    main()
