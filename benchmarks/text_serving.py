"""Text serving: the text model `<variant>_text` against its id model, on the same texts.

What it answers: does tokenizing and decoding in the server (the text model: a python-backend
model that tokenizes a batch, runs the id model and decodes) cost throughput, and what does
each way of running the id model cost (`--text-calls`: `onnxruntime`, the id model's ONNX in the
text model's own session, the package default; `bls`, a BLS request to the id model)? Target:
at concurrency 16, the default text model's throughput (texts/s) is at least 0.8x the id
model's on the same texts, the id model getting them tokenized by the client (`loadtest
--text-file` tokenizes with the same runtime tokenizer the text model runs).

Models: the quickstart's model per variant (task sparse_evidence, max_seq 64, d_model 64,
2 layers; `attndeploy.quickstart.pipeline.train_or_reuse` / `export_or_reuse`), trained for
`--train-steps` steps and cached in `--workdir` (by default the folder `benchmarks/predict.py`
uses, so the two share their models); or `--onnx FILE` (any exported model with a tokenizer,
e.g. a fine-tuned all-MiniLM-L6-v2, named by `--name`). Each is packaged with `PackageOptions()`
(what `attndeploy package` writes: the python-flavour id model `<variant>` and the text model
`<variant>_text`; `--threads` sets onnxruntime's threads), with `--text-bls` as `<variant>_bls`
and `<variant>_bls_text`, and with `--text-instances` values other than the default as extra
copies (`<variant>_i<N>...`), all in ONE repository served by ONE `tritonserver`.

Texts: `--texts FILE` (its non-blank lines), else `--lines` texts of the built-in task
(`example_texts("sparse_evidence", n, seed)`: 16-64 words each). Requests carry one text each
(`--batch`), closed loop.

How: `--rounds` rounds; each round visits every (variant, protocol, concurrency) cell in a
fresh random order and, in each cell, measures the id model and each text model back to back (in
random order) with `attndeploy.serving.loadtest.run_load_test` on `text_file` (20 warm-up
requests, `--windows` windows of `--window-s` s, all measured). The first round also checks a
sample of every model's answers against in-process onnxruntime (the load tester's checks: a text
model's `scores` against the id model's logits, its labels and attended tokens against the
decoded ones).

Statistics. On a shared machine the background load drifts by tens of percent within minutes,
so the id and text measurements of a cell are taken minutes apart at worst in one round but
seconds apart within a cell. The verdict uses `paired_ratio`: the median over rounds of the
text / id throughput ratio of each cell's adjacent pair; `ratio` (median text throughput over
median id throughput) is reported beside it, and `onnxruntime_vs_bls`, the paired ratio of the
two text models of a cell. `cpu_ms_per_text` is the CPU time the server (its
whole process group: tritonserver and every python-backend stub) and this client process spent
per text during the level: on a saturated machine throughput is about cores / CPU per text, and
CPU time hardly depends on what else the machine runs, so `cpu_ratio` (id CPU / text CPU per
text) is a second, steadier estimate of the throughput ratio.

Run: `.venv/bin/python benchmarks/text_serving.py [--quick] [--variants standard,ganet]
[--onnx FILE --name NAME] [--threads N] [--text-calls onnxruntime,bls] [--protocols grpc,http]
[--concurrency 16] [--text-instances 1,2] [--rounds 5] [--out DIR] [--workdir DIR]`. Writes
DIR/text_serving.json (DIR defaults to benchmarks/results/).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import resource
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python benchmarks/text_serving.py` from a checkout
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from predict import prepare_model  # noqa: E402  (the same trained and exported model)

from attndeploy.fsutil import atomic_write_text  # noqa: E402
from attndeploy.serving.packaging.options import PackageOptions  # noqa: E402

TARGET = 0.8  # text-model throughput / id-model throughput at concurrency TARGET_LEVEL
TARGET_LEVEL = 16
TASK = "sparse_evidence"
CALLS = ("onnxruntime", "bls")  # how a text model runs its id model; the first is the default
VARIANTS = ("standard", "qvi", "ganet", "evolving")


def write_texts(path: Path | None, n: int, seed: int, out: Path) -> tuple[Path, str]:
    """The text file to send: `path`, or `n` texts of the built-in task written to `out`."""
    if path is not None:
        return path, str(path)
    from attndeploy.data import example_texts

    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(f"{t}\n" for t in example_texts(TASK, n, seed=seed)),
                   encoding="utf-8")
    return out, f"built-in task {TASK!r}, {n} texts (seed {seed})"


def package(models: list[dict[str, Any]], repo: Path, instances: list[int], calls: list[str],
            threads: int) -> list[dict]:
    """Package every model (default options, plus one copy per extra `instances` value and per
    text call); return the (variant, instances, id model, {call: text model}) rows to measure."""
    from attndeploy.serving.packaging.repository import package_model

    if repo.exists():
        shutil.rmtree(repo)
    default = PackageOptions().text_instances
    rows = []
    for facts in models:
        variant = facts["variant"]
        for count in instances:
            base = variant if count == default else f"{variant}_i{count}"
            texts, id_models = {}, []
            for call in calls:
                name = base if call == CALLS[0] else f"{base}_{call}"
                written = package_model(Path(facts["onnx"]), repo, PackageOptions(
                    name=name, text_instances=count, threads=threads, text_bls=call == "bls"))
                texts[call] = next(m.name for m in written if m.is_text)
                id_models.append(name)
            rows.append({"variant": variant, "text_instances": count, "id_model": id_models[0],
                         "text_models": texts, "onnx": facts["onnx"]})
    return rows


def group_cpu_s(pgid: int) -> float:
    """User + system CPU seconds of every live process in process group `pgid` (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # fields after the name: state ppid pgrp ... utime stime
            total += int(fields[11]) + int(fields[12])
    return total / tick


def client_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(model: str, url: str, protocol: str, onnx: str, texts: Path, concurrency: int,
            args: argparse.Namespace, check: bool, server_pid: int) -> dict[str, Any]:
    from attndeploy.serving.loadtest import LoadTestConfig, run_load_test

    config = LoadTestConfig(
        model=model, url=url, protocol=protocol, concurrency=(concurrency,), batch=args.batch,
        text_file=texts, window_s=args.window_s, max_windows=args.windows,
        stable_windows=args.windows, warmup_requests=20,
        check_fraction=0.05 if check else 0.0, onnx_path=Path(onnx), seed=args.seed,
        max_level_s=120.0,
    )
    cpu_before = group_cpu_s(server_pid) + client_cpu_s()
    report = run_load_test(config, progress=False).to_dict()
    cpu_s = group_cpu_s(server_pid) + client_cpu_s() - cpu_before
    level = report["levels"][0]
    server = level.get("server") or {}
    answered = level["warmup_requests"] + sum(w["requests"] for w in level["windows"])
    texts_sent = answered * config.batch  # the level's texts, warm-up included
    return {
        "throughput": level["throughput_infer_per_s"],
        "cpu_ms_per_text": cpu_s * 1e3 / texts_sent if texts_sent else None,
        "p50_ms": level["latency_ms"]["p50"],
        "p95_ms": level["latency_ms"]["p95"],
        "avg_batch_size": server.get("avg_batch_size"),
        "queue_us": server.get("queue_us"),
        "compute_infer_us": server.get("compute_infer_us"),
        "errors": level["error_count"],
        "checks_done": level["checks"]["done"],
        "checks_failed": level["checks"]["failed"],
        "first_check_failure": level["checks"].get("first_failure"),
        "passed": report["passed"],
    }


def _median(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return float(statistics.median(kept)) if kept else None


def paired(numerators: list[dict[str, Any]], denominators: list[dict[str, Any]]) -> float | None:
    """The median over rounds of the throughput ratio of two models measured in one cell."""
    return _median([n["throughput"] / d["throughput"]
                    for n, d in zip(numerators, denominators, strict=True) if d["throughput"]])


def summarize(runs: dict[tuple, list[dict[str, Any]]], rows: list[dict], protocols: list[str],
              levels: list[int]) -> list[dict[str, Any]]:
    out = []
    for row, call in ((r, c) for r in rows for c in r["text_models"]):
        for protocol in protocols:
            for level in levels:
                ids = runs[(row["id_model"], protocol, level)]
                texts = runs[(row["text_models"][call], protocol, level)]
                others = {c: runs[(name, protocol, level)]
                          for c, name in row["text_models"].items() if c != call}
                id_tp = _median([r["throughput"] for r in ids])
                text_tp = _median([r["throughput"] for r in texts])
                ratio = text_tp / id_tp if id_tp and text_tp is not None else None
                paired_ratio = paired(texts, ids)
                id_cpu = _median([r["cpu_ms_per_text"] for r in ids])
                text_cpu = _median([r["cpu_ms_per_text"] for r in texts])
                out.append({
                    **{k: row[k] for k in ("variant", "text_instances", "id_model")},
                    "text_call": call, "text_model": row["text_models"][call],
                    "protocol": protocol, "concurrency": level,
                    "id": {k: _median([r[k] for r in ids]) for k in
                           ("throughput", "p50_ms", "p95_ms", "avg_batch_size",
                            "cpu_ms_per_text")},
                    "text": {k: _median([r[k] for r in texts]) for k in
                             ("throughput", "p50_ms", "p95_ms", "avg_batch_size",
                              "cpu_ms_per_text")},
                    "paired_ratio": paired_ratio, "ratio": ratio,
                    **{f"{call}_vs_{c}": paired(texts, other) for c, other in others.items()},
                    "cpu_ratio": id_cpu / text_cpu if id_cpu and text_cpu else None,
                    "meets_target": (paired_ratio is not None and paired_ratio >= TARGET
                                     if level == TARGET_LEVEL else None),
                    "errors": sum(r["errors"] for r in ids + texts),
                    "checks_done": sum(r["checks_done"] for r in ids + texts),
                    "checks_failed": sum(r["checks_failed"] for r in ids + texts),
                })
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="1 round, 2 windows of 2 s, standard and ganet, 30 train steps")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--protocols", default="grpc,http")
    parser.add_argument("--concurrency", default=str(TARGET_LEVEL))
    parser.add_argument("--text-instances", default=str(PackageOptions().text_instances),
                        help="text model instance counts to measure (the default is packaged "
                             "as <variant>_text, others as <variant>_i<N>_text)")
    parser.add_argument("--batch", type=int, default=1, help="texts per request")
    parser.add_argument("--text-calls", default=",".join(CALLS),
                        help="how the text model runs its id model: onnxruntime (its ONNX in "
                             "the text model's session, the default) and/or bls")
    parser.add_argument("--onnx", type=Path, default=None,
                        help="an exported model with a tokenizer, instead of the quickstart's")
    parser.add_argument("--name", default="model", help="the --onnx model's name")
    parser.add_argument("--threads", type=int, default=PackageOptions().threads,
                        help="onnxruntime threads per instance (package --threads)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--window-s", type=float, default=2.0)
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--texts", type=Path, default=None)
    parser.add_argument("--train-steps", type=int, default=300)
    parser.add_argument("--max-train-seconds", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="checkpoints and exports [default: OUT/predict_work, shared with "
                             "benchmarks/predict.py]")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.windows, args.window_s, args.train_steps = 1, 2, 2.0, 30
        if args.variants == ",".join(VARIANTS):
            args.variants = "standard,ganet"
    variants = [v for v in args.variants.split(",") if v]
    protocols = [p for p in args.protocols.split(",") if p]
    levels = [int(c) for c in args.concurrency.split(",") if c]
    instances = [int(i) for i in args.text_instances.split(",") if i]
    calls = [c for c in CALLS if c in args.text_calls.split(",")]
    if not calls:
        parser.error(f"--text-calls names none of {', '.join(CALLS)}")
    workdir = args.workdir or args.out / "predict_work"
    work = args.out / "text_serving_work"

    from attndeploy.serving.server import TritonServer, free_ports
    from attndeploy.serving.server.launch import servable_models

    started = time.perf_counter()
    if args.onnx is not None:
        models = [{"variant": args.name, "onnx": str(args.onnx)}]
    else:
        models = [prepare_model(v, workdir, args.train_steps, args.max_train_seconds)
                  for v in variants]
    texts, texts_source = write_texts(args.texts, args.lines, args.seed, work / "texts.txt")
    rows = package(models, work / "repo", instances, calls, args.threads)
    served, _ = servable_models(work / "repo")
    grpc, http, metrics = free_ports(3)
    runs: dict[tuple, list[dict[str, Any]]] = {}
    cells = [(row, protocol, level) for row in rows for protocol in protocols
             for level in levels]
    rng = random.Random(args.seed)
    with TritonServer(work / "repo", grpc_port=grpc, http_port=http, metrics_port=metrics,
                      models=served, log_file=work / "tritonserver.log") as server:
        urls = {"grpc": server.grpc_url, "http": server.http_url}
        for round_index in range(args.rounds):
            rng.shuffle(cells)
            for row, protocol, level in cells:
                group = [row["id_model"], *row["text_models"].values()]
                rng.shuffle(group)  # adjacent in time, in any order
                for name in group:
                    result = measure(name, urls[protocol], protocol, row["onnx"], texts,
                                     level, args, check=round_index == 0,
                                     server_pid=server.pid)
                    runs.setdefault((name, protocol, level), []).append(result)
                    print(f"round {round_index + 1}: {name:>16} {protocol:>4} c{level:<3}"
                          f" {result['throughput']:8.1f} texts/s  p50 {result['p50_ms']:.2f} ms"
                          f"  batch {result['avg_batch_size'] or 0:.2f}  cpu/text "
                          f"{result['cpu_ms_per_text'] or 0:.2f} ms", flush=True)
    summary = summarize(runs, rows, protocols, levels)
    default_rows = [s for s in summary if s["text_instances"] == PackageOptions().text_instances
                    and s["concurrency"] == TARGET_LEVEL and s["text_call"] == calls[0]]
    result = {
        "benchmark": "text_serving",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "cpus": os.cpu_count()},
        "target": {"ratio": TARGET, "concurrency": TARGET_LEVEL},
        "passed": bool(default_rows) and all(s["meets_target"] for s in default_rows),
        "texts": texts_source,
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "models": models,
        "summary": summary,
        "runs": {f"{m}|{p}|c{c}": r for (m, p, c), r in runs.items()},
        "seconds": round(time.perf_counter() - started, 1),
    }
    out = args.out / "text_serving.json"
    atomic_write_text(out, json.dumps(result, indent=2) + "\n")
    print(f"\n{'variant':>9} {'call':>11} {'inst':>4} {'proto':>5} {'conc':>4} {'id/s':>8} "
          f"{'text/s':>8} {'paired':>6} {'ratio':>6} {'cpu':>6}")
    for s in summary:
        print(f"{s['variant']:>9} {s['text_call']:>11} {s['text_instances']:>4} {s['protocol']:>5} "
              f"{s['concurrency']:>4} {s['id']['throughput']:8.1f} "
              f"{s['text']['throughput']:8.1f} {s['paired_ratio']:6.2f} {s['ratio']:6.2f} "
              f"{s['cpu_ratio'] or 0:6.2f}")
    print(f"wrote {out}; target {'met' if result['passed'] else 'NOT met'}")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
