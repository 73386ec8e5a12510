"""What the request guard costs: one text model served by two tritonservers at once, one behind
the guard (what `attndeploy serve` runs) and one without it (`serve --no-guard`), load-tested
in alternation.

    .venv/bin/python benchmarks/guard_overhead.py [--onnx FILE --texts FILE] [--rounds 4]

Model: the quickstart's `standard` model (benchmarks/predict.py's `prepare_model`, cached in
`--workdir`), or `--onnx` (any export with a tokenizer, e.g. a fine-tuned MiniLM) with
`--texts` (one text a line). Packaged with `package` defaults (the id model and its text model)
into one repository that both servers read.

How: `--rounds` rounds; each visits every (protocol, concurrency, model) cell in a fresh random
order and measures the guarded and the unguarded server back to back, in random order
(benchmarks/text_serving.py's `measure`: closed loop, one text per request, windows until
stable). The verdict is the paired ratio, guarded over unguarded, median over rounds, of each
cell's throughput and p50/p95, and the CPU each server spent per request (its process group,
plus the guard's process for the guarded one). The load average is recorded before and after.
Writes `guard_overhead.json` and `guard_overhead.png` under `--out`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from predict import prepare_model  # noqa: E402
from text_serving import group_cpu_s, measure, package, write_texts  # noqa: E402

from attndeploy.fsutil import atomic_write_png, atomic_write_text  # noqa: E402

SETUPS = ("guarded", "unguarded")


def process_cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of one process (0 when there is none)."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure_setup(server: Any, model: str, protocol: str, level: int, onnx: str, texts: Path,
                  args: argparse.Namespace, check: bool) -> dict[str, Any]:
    guard_pid = server.guard_pid
    url = server.grpc_url if protocol == "grpc" else server.http_url
    group_before, guard_before = group_cpu_s(server.pid), process_cpu_s(guard_pid)
    result = measure(model, url, protocol, onnx, texts, level, args, check, server.pid)
    result["guard_cpu_s"] = process_cpu_s(guard_pid) - guard_before
    result["server_cpu_s"] = group_cpu_s(server.pid) - group_before + result["guard_cpu_s"]
    return result


def ratio(guarded: list[dict], unguarded: list[dict], key: str) -> float | None:
    pairs = [g[key] / u[key] for g, u in zip(guarded, unguarded, strict=True)
             if g.get(key) and u.get(key)]
    return round(statistics.median(pairs), 4) if pairs else None


def summarize(runs: dict[tuple, dict[str, list[dict]]]) -> list[dict[str, Any]]:
    rows = []
    for (model, protocol, level), by_setup in sorted(runs.items()):
        guarded, unguarded = by_setup["guarded"], by_setup["unguarded"]
        rows.append({
            "model": model, "protocol": protocol, "concurrency": level,
            "throughput": {s: statistics.median(r["throughput"] for r in by_setup[s])
                           for s in SETUPS},
            "p95_ms": {s: statistics.median(r["p95_ms"] for r in by_setup[s]) for s in SETUPS},
            "throughput_ratio": ratio(guarded, unguarded, "throughput"),
            "p50_ratio": ratio(guarded, unguarded, "p50_ms"),
            "p95_ratio": ratio(guarded, unguarded, "p95_ms"),
            "cpu_ms_per_text_ratio": ratio(guarded, unguarded, "cpu_ms_per_text"),
            "guard_cpu_share": round(statistics.median(
                r["guard_cpu_s"] / r["server_cpu_s"] for r in guarded if r["server_cpu_s"]), 4),
            "checks_failed": sum(r["checks_failed"] for s in SETUPS for r in by_setup[s]),
            "errors": sum(r["errors"] for s in SETUPS for r in by_setup[s]),
        })
    return rows


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['model']}\n{r['protocol']} c{r['concurrency']}" for r in rows]
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(rows)), 4))
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [r["throughput_ratio"] or 0 for r in rows], 0.4,
           label="throughput, guarded / unguarded")
    ax.bar([x + 0.2 for x in xs], [r["p95_ratio"] or 0 for r in rows], 0.4,
           label="p95 latency, guarded / unguarded")
    ax.axhline(1.0, color="gray", linewidth=0.8)
    ax.set_xticks(list(xs), labels, fontsize=8)
    ax.set_ylabel("ratio (median over rounds)")
    ax.set_title("What the request guard costs")
    ax.legend(fontsize=8)
    fig.tight_layout()
    atomic_write_png(fig, path)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--onnx", type=Path, default=None)
    parser.add_argument("--texts", type=Path, default=None)
    parser.add_argument("--protocols", default="grpc,http")
    parser.add_argument("--concurrency", default="1,16")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--window-s", type=float, default=2.0)
    parser.add_argument("--batch", type=int, default=1, help="texts per request")
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--train-steps", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()

    from rich.progress import Progress

    from attndeploy.serving.packaging.options import PackageOptions
    from attndeploy.serving.server import TritonServer, free_ports

    work = args.out / "guard_overhead_work"
    facts = ({"variant": "model", "onnx": str(args.onnx)} if args.onnx is not None else
             prepare_model("standard", args.workdir or args.out / "predict_work",
                           args.train_steps, 60.0))
    texts, texts_source = write_texts(args.texts, args.lines, args.seed, work / "texts.txt")
    row = package([facts], work / "repo", [PackageOptions().text_instances], ["onnxruntime"],
                  PackageOptions().threads)[0]
    models = [row["id_model"], row["text_models"]["onnxruntime"]]
    protocols = [p for p in args.protocols.split(",") if p]
    levels = [int(c) for c in args.concurrency.split(",") if c]
    cells = [(m, p, c) for m in models for p in protocols for c in levels]
    runs: dict[tuple, dict[str, list[dict]]] = {cell: {s: [] for s in SETUPS} for cell in cells}
    rng = random.Random(args.seed)
    load_before = os.getloadavg()
    ports = free_ports(6)
    with TritonServer(work / "repo", grpc_port=ports[0], http_port=ports[1],
                      metrics_port=ports[2], log_file=work / "guarded.log") as guarded, \
         TritonServer(work / "repo", grpc_port=ports[3], http_port=ports[4],
                      metrics_port=ports[5], log_file=work / "unguarded.log",
                      guard=False) as unguarded, Progress() as bar:
        servers = {"guarded": guarded, "unguarded": unguarded}
        task = bar.add_task("rounds", total=args.rounds * len(cells) * 2)
        for round_index in range(args.rounds):
            rng.shuffle(cells)
            for model, protocol, level in cells:
                order = list(SETUPS)
                rng.shuffle(order)
                for setup in order:
                    bar.update(task, description=f"round {round_index}: {setup} {model} "
                                                 f"{protocol} c{level}")
                    runs[(model, protocol, level)][setup].append(measure_setup(
                        servers[setup], model, protocol, level, row["onnx"], texts, args,
                        check=round_index == 0))
                    bar.advance(task)
    rows = summarize(runs)
    result = {
        "benchmark": "guard_overhead", "model": facts, "texts": texts_source,
        "rounds": args.rounds, "load_before": load_before, "load_after": os.getloadavg(),
        "cpus": os.cpu_count(), "finished_at": time.strftime("%Y-%m-%d %H:%M:%S"),
        "rows": rows,
        "runs": [{"model": m, "protocol": p, "concurrency": c, "setup": s, **r}
                 for (m, p, c), by_setup in runs.items() for s, rs in by_setup.items()
                 for r in rs],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "guard_overhead.json", json.dumps(result, indent=2) + "\n")
    plot(rows, args.out / "guard_overhead.png")
    for r in rows:
        print(f"{r['model']:>16} {r['protocol']:>4} c{r['concurrency']:<3} throughput "
              f"{r['throughput']['guarded']:8.1f} / {r['throughput']['unguarded']:8.1f} "
              f"= {r['throughput_ratio']}  p95 ratio {r['p95_ratio']}  CPU/text ratio "
              f"{r['cpu_ms_per_text_ratio']}  guard share {r['guard_cpu_share']}")
    print(f"load {load_before} -> {result['load_after']}; wrote "
          f"{args.out / 'guard_overhead.json'}")
    return 0 if all(r["checks_failed"] == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
