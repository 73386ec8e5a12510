"""Serving: the quickstart's default model under the local Triton server (python flavour, CPU).

What it answers: which dynamic-batching settings (`max_queue_delay_us`, `max_batch_size`,
instances) the python flavour should be packaged with by default, and whether these defaults meet
the serving targets:

1. throughput at concurrency 16 >= 2.5x the throughput at concurrency 1 (batching works);
2. p50 latency at concurrency 1 <= in-process onnxruntime's p50 + 3 ms (same model.onnx, batch 1,
   seq 32, the server model's intra-op thread count, measured in the same run);
3. the load tester's request count over its measured windows agrees within 5 % with the server's
   own inference statistics for those windows.

Model: the `standard` variant trained and exported exactly as the quickstart does
(`attndeploy.quickstart.pipeline.train_or_reuse` / `export_or_reuse`: task sparse_evidence,
max_seq 64, d_model 64, 2 layers), with `--train-steps` steps (default the quickstart's 300,
60 s at most; `--quick` 30 steps). Serving speed does not depend on the weights. The checkpoint
and ONNX file are cached in `--workdir` and reused by later runs.

How: every configuration is packaged as its own python-flavour model in ONE repository, served
by ONE `tritonserver`, so all configurations see the same server process and the same machine.
Then `--rounds` rounds; each round visits every configuration in a fresh random order and runs
`attndeploy.serving.loadtest.run_load_test` at each concurrency (closed loop, batch-1 requests of
seq 32, 20 warm-up requests, `--windows` windows of `--window-s` seconds, all of them measured).
Right before each concurrency-1 level, in-process onnxruntime runs `--ort-calls` batch-1 calls
on the same model.onnx (intra-op threads = the server model's `threads`, inter-op 1), so the
baseline is interleaved with the server measurements and sees the same neighbours' load.
Per configuration and level, statistics are medians over rounds; ratios are ratios of medians.
The first round also compares a sample of responses with onnxruntime (`check_fraction`).

The chosen configuration is the package default (`PackageOptions()`: what `attndeploy package`
and the quickstart write); it is always in the sweep and its targets are reported on their own
(`chosen`). Beside it, `best_by_margin` names the configuration of this run that meets every
target with the most margin on the tighter of targets 1 and 2 (min of ratio / 2.5 and
3 ms / c1 overhead), and `noise_control` compares b16-d500 with b32-d500, which behave the same
at concurrency <= 16 (a batch never exceeds the requests in flight): their difference is this
run's noise, against which differences between configurations should be read.

Run: `.venv/bin/python benchmarks/serving.py [--quick] [--out DIR] [--workdir DIR]
[--configs b8-d0,b8-d500,...] [--rounds N]`. Writes DIR/serving.json and DIR/serving.png
(DIR defaults to benchmarks/results/). A configuration is `b<max_batch_size>-d<delay_us>`
with an optional `-i<instances>` (default 1) and `-t<threads>` (default 1).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import re
import shutil
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python benchmarks/serving.py` from a checkout
    sys.path.insert(0, str(ROOT))

from attndeploy.fsutil import atomic_write_png  # noqa: E402
from attndeploy.serving.packaging.options import PackageOptions  # noqa: E402

VARIANT = "standard"
SEQ = 32
THROUGHPUT_RATIO_TARGET = 2.5  # target 1: c16 / c1 throughput
LATENCY_OVERHEAD_TARGET_MS = 3.0  # target 2: c1 p50 - in-process ORT p50
COUNT_AGREEMENT_TARGET = 0.05  # target 3: |server - client| / client inference count
RATIO_LEVELS = (1, 16)

DEFAULT_CONFIGS = (
    "b8-d0", "b8-d100", "b8-d250", "b8-d500", "b8-d1000", "b8-d2000",
    "b16-d500", "b32-d500", "b8-d500-i2",
)
QUICK_CONFIGS = ("b8-d0", "b8-d100", "b8-d500", "b8-d2000")


# --------------------------------------------------------------------------- configurations


@dataclass(frozen=True)
class ServeConfig:
    max_batch_size: int
    max_queue_delay_us: int
    instances: int = 1
    threads: int = 1

    @property
    def name(self) -> str:
        text = f"b{self.max_batch_size}-d{self.max_queue_delay_us}"
        if self.instances != 1:
            text += f"-i{self.instances}"
        if self.threads != 1:
            text += f"-t{self.threads}"
        return text

    @property
    def model_name(self) -> str:
        return f"{VARIANT}_{self.name.replace('-', '_')}"

    def package_options(self) -> PackageOptions:
        return PackageOptions(
            flavor="python", name=self.model_name, max_batch_size=self.max_batch_size,
            max_queue_delay_us=self.max_queue_delay_us, instances=self.instances,
            threads=self.threads, force=True,
        )

    @classmethod
    def parse(cls, text: str) -> ServeConfig:
        match = re.fullmatch(r"b(\d+)-d(\d+)(?:-i(\d+))?(?:-t(\d+))?", text.strip())
        if match is None:
            raise SystemExit(f"bad configuration {text!r}; expected e.g. b8-d500 or b8-d500-i2")
        b, d, i, t = match.groups()
        return cls(int(b), int(d), int(i or 1), int(t or 1))

    @classmethod
    def package_default(cls) -> ServeConfig:
        default = PackageOptions()
        return cls(default.max_batch_size, default.max_queue_delay_us, default.instances,
                   default.threads)


# --------------------------------------------------------------------------- model


def prepare_model(workdir: Path, steps: int, max_seconds: float, log: Any) -> dict[str, Any]:
    """Train (or reuse) and export the quickstart's `standard` model; returns facts about it."""
    from attndeploy.quickstart.pipeline import (
        QuickstartOptions,
        export_or_reuse,
        train_or_reuse,
    )

    options = QuickstartOptions(workdir=workdir, variants=(VARIANT,), steps=steps,
                                max_train_seconds=max_seconds)
    ckpt = workdir / "checkpoints" / f"{VARIANT}-steps{steps}"
    onnx_path = workdir / "onnx" / f"{VARIANT}-steps{steps}.onnx"
    metrics, reused_ckpt, train_s = train_or_reuse(VARIANT, ckpt, options, log, False)
    reused_onnx, export_s = export_or_reuse(VARIANT, ckpt, onnx_path, log)
    config = json.loads((ckpt / "config.json").read_text())
    return {
        "variant": VARIANT, "task": options.task, "train_steps": steps,
        "max_train_seconds": max_seconds, "checkpoint": str(ckpt), "onnx": str(onnx_path),
        "reused_checkpoint": reused_ckpt, "reused_export": reused_onnx,
        "train_seconds": train_s, "export_seconds": export_s, "metrics": metrics,
        "model_config": config.get("model"),
        "training": config.get("training"),
    }


def package_all(onnx_path: Path, repo: Path, configs: list[ServeConfig]) -> None:
    from attndeploy.serving.packaging.repository import package_model

    if repo.exists():
        shutil.rmtree(repo)
    for config in configs:
        package_model(onnx_path, repo, config.package_options())


# --------------------------------------------------------------------------- in-process ORT


class OrtBaseline:
    """In-process onnxruntime on the served model.onnx: batch 1, seq SEQ, `threads` intra-op."""

    def __init__(self, onnx_path: Path, threads: int, vocab: int, seed: int) -> None:
        from attndeploy.runtime.sessions import create_session

        # threads intra-op and one inter-op thread, as the generated model.py builds it
        self.session = create_session(onnx_path, threads=threads)
        self.outputs = [o.name for o in self.session.get_outputs() if o.name == "logits"]
        rng = np.random.default_rng(seed)
        self.feeds = [
            {"input_ids": rng.integers(2, vocab, (1, SEQ), dtype=np.int64),  # [1, SEQ]
             "attention_mask": np.ones((1, SEQ), dtype=np.int64)}  # [1, SEQ]
            for _ in range(64)
        ]
        self.latencies_ms: list[list[float]] = []  # one list per burst

    def burst(self, calls: int) -> float:
        """`calls` timed calls (after 10 untimed); records them and returns their p50 in ms."""
        run, outputs = self.session.run, self.outputs
        for feed in self.feeds[:10]:
            run(outputs, feed)
        times = []
        for i in range(calls):
            feed = self.feeds[i % len(self.feeds)]
            t0 = time.perf_counter_ns()
            run(outputs, feed)
            times.append((time.perf_counter_ns() - t0) / 1e6)
        self.latencies_ms.append(times)
        return float(np.median(times))


# --------------------------------------------------------------------------- measuring


def measure(config: ServeConfig, url: str, onnx_path: Path, concurrency: int,
            args: argparse.Namespace, check: bool) -> dict[str, Any]:
    from attndeploy.serving.loadtest import LoadTestConfig, run_load_test

    load = LoadTestConfig(
        model=config.model_name, url=url, concurrency=(concurrency,), seq_lengths=(SEQ,),
        window_s=args.window_s, max_windows=args.windows, stable_windows=args.windows,
        warmup_requests=20, check_fraction=0.05 if check else 0.0, onnx_path=onnx_path,
        seed=args.seed, max_level_s=60.0,
    )
    level = run_load_test(load, progress=False).to_dict()["levels"][0]
    server = level.get("server") or {}
    return {
        "throughput": level["throughput_infer_per_s"],
        "p50_ms": level["latency_ms"]["p50"],
        "p95_ms": level["latency_ms"]["p95"],
        "p99_ms": level["latency_ms"]["p99"],
        "avg_batch_size": server.get("avg_batch_size"),
        "queue_us": server.get("queue_us"),
        "compute_infer_us": server.get("compute_infer_us"),
        "request_us": server.get("request_us"),
        "client_inference_count": level["client_inference_count"],
        "server_inference_count": server.get("inference_count"),
        "count_rel_diff": level["count_rel_diff"],
        "errors": level["error_count"],
        "checks_done": level["checks"]["done"],
        "checks_failed": level["checks"]["failed"],
        "measured_s": level["measured_s"],
        "windows": [
            {k: w[k] for k in ("throughput_rps", "p50_ms", "p95_ms", "requests")}
            for w in level["windows"]
        ],
    }


def _median(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return float(statistics.median(kept)) if kept else None


def summarize(config: ServeConfig, runs: dict[int, list[dict[str, Any]]], ort_p50: float
              ) -> dict[str, Any]:
    levels = {}
    for c, rows in sorted(runs.items()):
        levels[str(c)] = {
            key: _median([r[key] for r in rows])
            for key in ("throughput", "p50_ms", "p95_ms", "p99_ms", "avg_batch_size",
                        "queue_us", "compute_infer_us", "request_us")
        }
    c1, c16 = levels.get("1"), levels.get("16")
    ratio = (c16["throughput"] / c1["throughput"]
             if c1 and c16 and c1["throughput"] else None)
    paired = _median([
        hi["throughput"] / lo["throughput"]
        for lo, hi in zip(runs.get(1, []), runs.get(16, []), strict=False) if lo["throughput"]
    ])
    overhead = c1["p50_ms"] - ort_p50 if c1 and c1["p50_ms"] is not None else None
    diffs = [r["count_rel_diff"] for rows in runs.values() for r in rows
             if r["count_rel_diff"] is not None]
    worst = max(diffs) if diffs else None
    targets = {
        "throughput_ratio_c16_c1": {
            "value": ratio, "target": f">= {THROUGHPUT_RATIO_TARGET}",
            "paired_median": paired,
            "met": ratio is not None and ratio >= THROUGHPUT_RATIO_TARGET,
            "margin": ratio / THROUGHPUT_RATIO_TARGET if ratio else None,
        },
        "c1_p50_overhead_ms": {
            "value": overhead, "target": f"<= {LATENCY_OVERHEAD_TARGET_MS} ms",
            "server_c1_p50_ms": c1["p50_ms"] if c1 else None, "ort_p50_ms": ort_p50,
            "met": overhead is not None and overhead <= LATENCY_OVERHEAD_TARGET_MS,
            "margin": LATENCY_OVERHEAD_TARGET_MS / overhead if overhead and overhead > 0
            else None,
        },
        "count_agreement_worst": {
            "value": worst, "target": f"<= {COUNT_AGREEMENT_TARGET}",
            "measurements": len(diffs),
            "met": worst is not None and worst <= COUNT_AGREEMENT_TARGET,
        },
    }
    errors = sum(r["errors"] for rows in runs.values() for r in rows)
    failed = sum(r["checks_failed"] for rows in runs.values() for r in rows)
    return {"config": asdict(config), "name": config.name, "model": config.model_name,
            "levels": levels, "targets": targets, "errors": errors, "checks_failed": failed,
            "all_met": all(t["met"] for t in targets.values()) and not errors and not failed}


def choose(summaries: dict[str, dict[str, Any]]) -> str | None:
    """The configuration meeting every target with the most margin on the tighter target."""
    def score(s: dict[str, Any]) -> float:
        t = s["targets"]
        return min(t["throughput_ratio_c16_c1"]["margin"] or 0.0,
                   t["c1_p50_overhead_ms"]["margin"] or float("inf"))

    passing = [name for name, s in summaries.items() if s["all_met"]]
    return max(passing, key=lambda n: score(summaries[n])) if passing else None


def noise_control(summaries: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """Relative differences between b16-d500 and b32-d500 (the same server behaviour at c<=16)."""
    a, b = summaries.get("b16-d500"), summaries.get("b32-d500")
    if a is None or b is None:
        return None

    def rel(x: float | None, y: float | None) -> float | None:
        return round(abs(x - y) / ((x + y) / 2), 4) if x and y else None

    out = {f"c{c}_throughput": rel(a["levels"][c]["throughput"], b["levels"][c]["throughput"])
           for c in a["levels"] if c in b["levels"]}
    out["c1_p50"] = rel(a["levels"]["1"]["p50_ms"], b["levels"]["1"]["p50_ms"])
    out["ratio_c16_c1"] = rel(a["targets"]["throughput_ratio_c16_c1"]["value"],
                              b["targets"]["throughput_ratio_c16_c1"]["value"])
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    from rich.console import Console

    from attndeploy.serving.loadtest import vocab_from_onnx
    from attndeploy.serving.server import TritonServer, free_ports

    console = Console(stderr=True)
    log = console.log
    started = time.perf_counter()
    default = ServeConfig.package_default()
    configs = [ServeConfig.parse(c) for c in args.configs.split(",") if c]
    if default not in configs:
        configs.append(default)
    threads = {c.threads for c in configs}
    workdir = args.workdir
    workdir.mkdir(parents=True, exist_ok=True)

    t0 = time.perf_counter()
    model = prepare_model(workdir, args.train_steps, args.max_train_seconds, log)
    onnx_path = Path(model["onnx"])
    prepare_s = time.perf_counter() - t0
    repo = workdir / "repo"
    package_all(onnx_path, repo, configs)
    served_onnx = repo / configs[0].model_name / "1" / "model.onnx"
    vocab = vocab_from_onnx(served_onnx) or 32
    baselines = {t: OrtBaseline(served_onnx, t, vocab, args.seed) for t in threads}
    rng = random.Random(args.seed)
    runs: dict[str, dict[int, list[dict[str, Any]]]] = {
        c.name: {level: [] for level in args.levels} for c in configs
    }
    order_log: list[list[str]] = []

    ports = free_ports(3)
    log(f"starting tritonserver with {len(configs)} models")
    t0 = time.perf_counter()
    server = TritonServer(repo, grpc_port=ports[0], http_port=ports[1], metrics_port=ports[2],
                          log_file=workdir / "tritonserver.log",
                          models=[c.model_name for c in configs], ready_timeout_s=240.0)
    with server:
        server_start_s = time.perf_counter() - t0
        log(f"server ready in {server_start_s:.1f} s")
        for round_index in range(args.rounds):
            order = configs[:]
            rng.shuffle(order)
            order_log.append([c.name for c in order])
            for config in order:
                for level in args.levels:
                    if level == 1:
                        baselines[config.threads].burst(args.ort_calls)
                    row = measure(config, server.grpc_url, onnx_path, level, args,
                                  check=round_index == 0)
                    row["round"] = round_index
                    runs[config.name][level].append(row)
                    log(f"round {round_index} {config.name:>12} c{level:<3} "
                        f"{row['throughput']:7.0f} infer/s  p50 {row['p50_ms']:.2f} ms  "
                        f"batch {row['avg_batch_size'] or 0:.2f}  "
                        f"count diff {100 * (row['count_rel_diff'] or 0):.2f} %")
    ort = {
        str(t): {
            "p50_ms": float(np.median([x for b in base.latencies_ms for x in b])),
            "burst_p50_ms": [float(np.median(b)) for b in base.latencies_ms],
            "p90_ms": float(np.percentile([x for b in base.latencies_ms for x in b], 90)),
            "calls": sum(len(b) for b in base.latencies_ms),
        }
        for t, base in baselines.items()
    }
    summaries = {
        c.name: summarize(c, runs[c.name], ort[str(c.threads)]["p50_ms"]) for c in configs
    }
    best = choose(summaries)
    return {
        "benchmark": "serving",
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": machine(),
        "settings": {
            "quick": args.quick, "rounds": args.rounds, "levels": list(args.levels),
            "window_s": args.window_s, "windows": args.windows, "ort_calls": args.ort_calls,
            "seq": SEQ, "batch": 1, "flavor": "python", "seed": args.seed,
        },
        "model": model,
        "targets": {
            "throughput_ratio_c16_c1": THROUGHPUT_RATIO_TARGET,
            "c1_p50_overhead_ms": LATENCY_OVERHEAD_TARGET_MS,
            "count_agreement": COUNT_AGREEMENT_TARGET,
        },
        "package_default": default.name,
        "chosen": {"name": default.name, "package_options": asdict(default),
                   "targets": summaries[default.name]["targets"],
                   "all_met": summaries[default.name]["all_met"]},
        "best_by_margin": best,
        "noise_control": noise_control(summaries),
        "ort_in_process": ort,
        "configs": summaries,
        "order": order_log,
        "raw": {name: {str(c): rows for c, rows in levels.items()}
                for name, levels in runs.items()},
        "timings_s": {"prepare_model": round(prepare_s, 1),
                      "server_start": round(server_start_s, 1),
                      "total": round(time.perf_counter() - started, 1)},
        "load_average_end": list(os.getloadavg()),
    }


def machine() -> dict[str, Any]:
    import onnxruntime as ort

    versions = {"onnxruntime": ort.__version__, "numpy": np.__version__}
    for name in ("tritonclient", "nvidia-pytriton"):
        try:
            from importlib.metadata import version

            versions[name] = version(name)
        except Exception:  # a missing package is just not reported
            pass
    return {"platform": platform.platform(), "python": sys.version.split()[0],
            "cpu_count": os.cpu_count(), "load_average_start": list(os.getloadavg()),
            "versions": versions}


# --------------------------------------------------------------------------- output


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    configs = report["configs"]
    default = report["package_default"]
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(17, 5))
    for name, s in configs.items():
        levels = sorted(int(c) for c in s["levels"])
        values = [s["levels"][str(c)]["throughput"] for c in levels]
        style = "-o" if name == default else "--."
        left.plot(levels, values, style, label=name + (" (default)" if name == default else ""),
                  linewidth=2.5 if name == default else 1.2)
    levels = sorted({int(c) for s in configs.values() for c in s["levels"]})
    left.set_xscale("log", base=2)
    left.set_xticks(levels, [str(c) for c in levels])
    left.set_xlabel("concurrency (batch-1 requests of seq 32 in flight)")
    left.set_ylabel("throughput (infer/s, median over rounds)")
    left.set_title("throughput vs concurrency per configuration")
    left.grid(alpha=0.3)
    left.legend(fontsize=8)

    names = list(configs)
    x = np.arange(len(names))
    colors = ["tab:red" if n == default else "tab:blue" for n in names]
    ratios = [configs[n]["targets"]["throughput_ratio_c16_c1"]["value"] or 0 for n in names]
    middle.bar(x, ratios, color=colors)
    middle.axhline(THROUGHPUT_RATIO_TARGET, color="k", linestyle="--",
                   label=f"target 1: >= {THROUGHPUT_RATIO_TARGET:g}")
    middle.set_xticks(x, names, rotation=30, ha="right", fontsize=8)
    middle.set_ylabel("throughput c16 / c1")
    middle.set_title("batching gain (c16 / c1 throughput)")
    middle.legend(fontsize=8)

    p50 = [configs[n]["levels"]["1"]["p50_ms"] for n in names]
    ort = [configs[n]["targets"]["c1_p50_overhead_ms"]["ort_p50_ms"] for n in names]
    right.bar(x, p50, color=colors, label="server p50 at c1 (red: default)")
    right.bar(x, ort, color="tab:orange", label="in-process onnxruntime p50")
    right.plot(x, [o + LATENCY_OVERHEAD_TARGET_MS for o in ort], "k_", markersize=22,
               markeredgewidth=2, label=f"target 2: ORT + {LATENCY_OVERHEAD_TARGET_MS:g} ms")
    right.set_xticks(x, names, rotation=30, ha="right", fontsize=8)
    right.set_ylabel("ms")
    right.set_title("p50 latency at concurrency 1 (batch 1, seq 32)")
    right.legend(fontsize=8)
    fig.suptitle(f"attndeploy python flavour on {report['machine']['cpu_count']} CPU cores "
                 f"({report['model']['variant']} model); medians over "
                 f"{report['settings']['rounds']} interleaved rounds", fontsize=10)
    fig.tight_layout()
    atomic_write_png(fig, path, dpi=110)
    plt.close(fig)


def print_table(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="serving sweep (medians over rounds)")
    levels = report["settings"]["levels"]
    for column in ("config", *[f"c{c} infer/s" for c in levels], "c16/c1", "paired",
                   "c1 p50 ms",
                   "- ORT ms", "c16 batch", "count diff", "targets"):
        table.add_column(column, justify="right")
    for name, s in report["configs"].items():
        t = s["targets"]
        ratio = t["throughput_ratio_c16_c1"]["value"]
        over = t["c1_p50_overhead_ms"]["value"]
        batch = s["levels"].get("16", {}).get("avg_batch_size")
        tag = ("*" if name == report["best_by_margin"] else "") + (
            " (default)" if name == report["package_default"] else "")
        table.add_row(
            name + tag,
            *[f"{s['levels'][str(c)]['throughput']:.0f}" for c in levels],
            f"{ratio:.2f}" if ratio else "-",
            f"{t['throughput_ratio_c16_c1']['paired_median'] or 0:.2f}",
            f"{s['levels']['1']['p50_ms']:.2f}",
            f"{over:.2f}" if over is not None else "-",
            f"{batch:.2f}" if batch else "-",
            f"{100 * (t['count_agreement_worst']['value'] or 0):.2f} %",
            " ".join("y" if t[k]["met"] else "n" for k in t),
        )
    Console(width=150).print(table)
    ort = report["ort_in_process"]
    print("in-process onnxruntime p50 (ms):", {t: round(v["p50_ms"], 3) for t, v in ort.items()})
    chosen = report["chosen"]
    print(f"chosen (package default): {chosen['name']}, every target met: {chosen['all_met']}"
          f" | best by margin in this run (*): {report['best_by_margin']}"
          f" | noise control: {report['noise_control']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="checkpoint, ONNX, repository, server log (default OUT/serving_work)")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 4 configurations, concurrency 1 and 16, one round")
    parser.add_argument("--configs", default=None)
    parser.add_argument("--levels", default=None, help="concurrency levels (default 1,4,16)")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--window-s", type=float, default=None)
    parser.add_argument("--windows", type=int, default=None)
    parser.add_argument("--ort-calls", type=int, default=300)
    parser.add_argument("--train-steps", type=int, default=None)
    parser.add_argument("--max-train-seconds", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    quick = args.quick
    args.configs = args.configs or ",".join(QUICK_CONFIGS if quick else DEFAULT_CONFIGS)
    args.levels = tuple(int(c) for c in (args.levels or ("1,16" if quick else "1,4,16"))
                        .split(","))
    missing = [c for c in RATIO_LEVELS if c not in args.levels]
    if missing:
        raise SystemExit(f"--levels must include {RATIO_LEVELS} (the targets use them)")
    args.rounds = args.rounds or (2 if quick else 4)
    args.window_s = args.window_s or (1.5 if quick else 2.0)
    args.windows = args.windows or 1
    args.train_steps = args.train_steps or (30 if quick else 300)
    if quick:
        args.max_train_seconds = min(args.max_train_seconds, 20.0)
    args.workdir = args.workdir or args.out / "serving_work"
    args.out.mkdir(parents=True, exist_ok=True)
    report = run(args)
    json_path = args.out / "serving.json"
    json_path.write_text(json.dumps(report, indent=2, default=str) + "\n")
    plot(report, args.out / "serving.png")
    print_table(report)
    print(f"wrote {json_path} and {args.out / 'serving.png'}")


if __name__ == "__main__":
    main()
