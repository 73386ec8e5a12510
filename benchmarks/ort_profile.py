"""Where the time goes, node by node: onnxruntime's profiler on two ONNX files (issue #55's
batch-1 gap between attndeploy's standard export and a plain `torch.onnx` export).

    .venv/bin/python benchmarks/hf_references.py --variants standard --rounds 1 --keep DIR
    .venv/bin/python benchmarks/ort_profile.py DIR/plain_ort.onnx DIR/standard_ort.onnx

Each model runs in onnxruntime's CPU provider (all graph optimizations, `--threads` intra-op
threads, no spinning) with `enable_profiling`, at each `--shapes` shape (random ids, no
padding): `--warmup` runs, then `--runs` profiled runs. From the profiler's trace, the kernel
events (`cat == "Node"`, `*_kernel_time`) are summed per op type and per node and divided by the
runs (µs per run); the session's node count after onnxruntime's optimizations and the run's
wall time beside them. The first file is the reference: `diff_by_op` is the second's time per
op type minus the first's, largest first, which names where the extra time goes.

Writes `ort_profile.json` under `--out` (benchmarks/results/). The machine's load average is
recorded: kernel times are CPU work, less disturbed by load than wall times, but not immune.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attndeploy.fsutil import atomic_write_text  # noqa: E402

console = Console(width=None if sys.stdout.isatty() else 160)


def feed_for(model: onnx.ModelProto, batch: int, seq: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng([batch, seq])
    feed = {}
    for value in model.graph.input:
        if "mask" in value.name:
            feed[value.name] = np.ones((batch, seq), np.int64)
        else:
            feed[value.name] = rng.integers(1000, 30000, (batch, seq)).astype(np.int64)
    return feed


def profile(path: Path, batch: int, seq: int, args: argparse.Namespace, work: Path
            ) -> dict[str, Any]:
    """Per-op-type and per-node kernel µs per run, the optimized node count, wall ms."""
    model = onnx.load(str(path))
    feed = feed_for(model, batch, seq)
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = args.threads, 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.optimized_model_filepath = str(work / f"{path.stem}.optimized.onnx")
    options.log_severity_level = 3
    options.enable_profiling = True
    options.profile_file_prefix = str(work / f"{path.stem}_{batch}x{seq}")
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    for _ in range(args.warmup):
        session.run(None, feed)
    walls = []
    for _ in range(args.runs):
        started = time.perf_counter()
        session.run(None, feed)
        walls.append((time.perf_counter() - started) * 1e3)
    trace = json.loads(Path(session.end_profiling()).read_text())
    by_op: dict[str, float] = defaultdict(float)
    by_node: dict[str, float] = defaultdict(float)
    node_op: dict[str, str] = {}
    runs_seen = sum(1 for e in trace if e.get("name") == "model_run")
    for event in trace:
        if event.get("cat") != "Node" or not event.get("name", "").endswith("_kernel_time"):
            continue
        op = event.get("args", {}).get("op_name", "?")
        node = event["name"][: -len("_kernel_time")]
        by_op[op] += event["dur"]
        by_node[node] += event["dur"]
        node_op[node] = op
    # the warm-up runs are profiled too: divide by every run the trace holds
    runs = max(runs_seen, 1)
    optimized = onnx.load(options.optimized_model_filepath)
    top = sorted(by_node.items(), key=lambda kv: -kv[1])[: args.top]
    return {
        "shape": f"{batch}x{seq}",
        "nodes_after_ort": len(optimized.graph.node),
        "ops_after_ort": dict(sorted(_counts(optimized).items())),
        "kernel_us_per_run": round(sum(by_op.values()) / runs, 1),
        "wall_ms_median": round(statistics.median(walls), 3),
        "by_op_us": {op: round(us / runs, 1) for op, us in
                     sorted(by_op.items(), key=lambda kv: -kv[1])},
        "top_nodes_us": [{"node": n, "op": node_op[n], "us": round(us / runs, 1)}
                         for n, us in top],
    }


def _counts(model: onnx.ModelProto) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for node in model.graph.node:
        counts[f"{node.domain}::{node.op_type}" if node.domain else node.op_type] += 1
    return counts


def diff(reference: dict[str, Any], other: dict[str, Any]) -> list[dict[str, Any]]:
    ops = set(reference["by_op_us"]) | set(other["by_op_us"])
    rows = [{"op": op, "reference_us": reference["by_op_us"].get(op, 0.0),
             "other_us": other["by_op_us"].get(op, 0.0)} for op in ops]
    for row in rows:
        row["extra_us"] = round(row["other_us"] - row["reference_us"], 1)
    return sorted(rows, key=lambda r: -abs(r["extra_us"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reference", type=Path, help="e.g. the plain torch.onnx export")
    parser.add_argument("other", type=Path, help="e.g. attndeploy's standard export")
    parser.add_argument("--shapes", default="1x16,1x32")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results")
    args = parser.parse_args()
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    report: dict[str, Any] = {
        "reference": str(args.reference), "other": str(args.other), "threads": args.threads,
        "runs": args.runs, "warmup": args.warmup, "onnxruntime": ort.__version__,
        "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
        "shapes": {},
    }
    with tempfile.TemporaryDirectory(prefix="attndeploy-ort-profile-") as folder:
        for batch, seq in shapes:
            ref = profile(args.reference, batch, seq, args, Path(folder))
            other = profile(args.other, batch, seq, args, Path(folder))
            report["shapes"][f"{batch}x{seq}"] = {"reference": ref, "other": other,
                                                  "diff_by_op": diff(ref, other)}
            table = Table(title=f"{batch}x{seq}: kernel µs per run by op type "
                                f"(reference {ref['kernel_us_per_run']:.0f}, other "
                                f"{other['kernel_us_per_run']:.0f}; nodes "
                                f"{ref['nodes_after_ort']} / {other['nodes_after_ort']})")
            for column in ("op", "reference", "other", "extra"):
                table.add_column(column, justify="left" if column == "op" else "right")
            for row in report["shapes"][f"{batch}x{seq}"]["diff_by_op"][:14]:
                table.add_row(row["op"], f"{row['reference_us']:.1f}", f"{row['other_us']:.1f}",
                              f"{row['extra_us']:+.1f}")
            console.print(table)
    report["uptime_after"] = subprocess.run(["uptime"], capture_output=True,
                                            text=True).stdout.strip()
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "ort_profile.json", json.dumps(report, indent=1) + "\n")
    console.print(f"wrote {args.out / 'ort_profile.json'}; load {report['uptime']}")


if __name__ == "__main__":
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    main()
