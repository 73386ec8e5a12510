"""Fine-tuned MiniLMs served as text, fp32 and int8, under the local Triton server at
concurrency 16, against in-process onnxruntime at the batch sizes the server formed.

    .venv/bin/python benchmarks/served_int8.py --checkpoint [LABEL=]CKPT [--checkpoint ...]
        --data FILE [--rounds 2]

Each checkpoint (a `train --hf-model` one; LABEL defaults to its folder's name, e.g. the variant
`pretrained.py --keep` names it) is exported, quantized (`attndeploy quantize`, dynamic, per
channel, every block by default, or `--exclude-worst N` blocks in fp32, or per label:
`--exclude-worst standard=3,ganet=1`, the fewest blocks in fp32 that keep 99 % of the labels;
`--reduce-range LABEL,...` quantizes those checkpoints' weights in 7 bits; `--activations
per-batch` scales activations per batch instead of quantize's default per row) and packaged
twice into one repository, python flavour with text models (`LABEL_fp32_text`,
`LABEL_int8_text`; `package` defaults otherwise). One
`tritonserver` serves them all. Each round load-tests every text model in a fresh random order
at `--concurrency` (closed loop, one real text per request: the held-out texts of FILE, split
seed 0, 20 %), then runs in-process onnxruntime (`InferenceModel.predict`: tokenizing and
decoding included, as the text model does) at the average batch size the server formed, for as
long. Reports throughput (texts/s), p50/p95, the server's batch sizes, int8 over fp32, served
over in-process and each model over the first checkpoint's (paired per round), the load
average. Writes `served_int8.json` and `served_int8.png`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from real_speed import held_out_file, per_label_counts  # noqa: E402

from attndeploy.fsutil import atomic_write_png, atomic_write_text  # noqa: E402
from attndeploy.quantize.options import ACTIVATIONS  # noqa: E402


def checkpoint_labels(given: list[str]) -> dict[str, Path]:
    """{label: checkpoint folder} from `--checkpoint [LABEL=]PATH` arguments."""
    labelled = {}
    for item in given:
        label, _, path = item.rpartition("=") if "=" in item else ("", "", item)
        path = Path(path)
        label = label or path.name
        if label in labelled:
            raise SystemExit(f"two checkpoints are labelled {label!r}; name them LABEL=PATH")
        labelled[label] = path
    return labelled


def exclude_worst_for(given: str, label: str) -> int:
    """`--exclude-worst`'s N for `label`: the one number given, else its LABEL=N, else 0."""
    if "=" not in given:
        return int(given)
    return per_label_counts(given).get(label, 0)


def prepare(label: str, checkpoint: Path, texts_file: Path, repo: Path, work: Path,
            quantize_options: dict) -> tuple[dict[str, tuple[str, Path]], dict]:
    """Export, quantize and package one checkpoint: its served models and quantize's report."""
    from attndeploy.export.exporter import export_checkpoint
    from attndeploy.quantize import QuantizeOptions, quantize_model
    from attndeploy.serving.packaging.repository import PackageOptions, package_model

    fp32 = work / f"{label}_fp32.onnx"
    export_checkpoint(checkpoint, fp32)
    int8 = work / f"{label}_int8.onnx"
    quantized = quantize_model(fp32, int8, QuantizeOptions(**quantize_options), data=texts_file)
    quantized.raise_for_failure()
    for path in (fp32, int8):
        package_model(path, repo, PackageOptions(name=path.stem))
    return ({f"{label}_fp32": (f"{label}_fp32_text", fp32),
             f"{label}_int8": (f"{label}_int8_text", int8)}, quantized.to_dict())


def measure_rounds(models: dict[str, tuple[str, Path]], repo: Path, lines: Path, work: Path,
                   args: argparse.Namespace) -> dict[str, list[dict]]:
    """Every model load-tested and run in process once per round, in a fresh random order."""
    from rich.progress import Progress

    from attndeploy.serving.loadtest import LoadTestConfig, run_load_test
    from attndeploy.serving.server import TritonServer, free_ports
    from attndeploy.serving.tune.in_process import measure_in_process

    runs: dict[str, list[dict]] = {name: [] for name in models}
    grpc, http, metrics = free_ports()
    with TritonServer(repo, grpc_port=grpc, http_port=http, metrics_port=metrics,
                      log_file=work / "server.log") as server, Progress() as bar:
        task = bar.add_task("served, then in process", total=args.rounds * len(models))
        for round_index in range(args.rounds):
            for name in random.sample(list(models), len(models)):
                bar.update(task, description=f"round {round_index}: {name}")
                text_model, onnx_path = models[name]
                report = run_load_test(LoadTestConfig(
                    model=text_model, url=server.grpc_url, concurrency=(args.concurrency,),
                    text_file=lines, onnx_path=onnx_path, window_s=args.window, max_windows=6,
                    check_fraction=0.0), progress=False).to_dict()
                level = report["levels"][0]
                batch = max(1, round(level["server"].get("avg_batch_size") or 1))
                local = measure_in_process(onnx_path, text=True, batch_size=batch, seq=32,
                                           threads=1, workers=1, seconds=args.window * 2,
                                           text_file=lines)
                runs[name].append({
                    "round": round_index,
                    "throughput": level["throughput_infer_per_s"],
                    "p50_ms": level["latency_ms"]["p50"], "p95_ms": level["latency_ms"]["p95"],
                    "avg_batch_size": level["server"].get("avg_batch_size"),
                    "in_process_throughput": local.throughput, "in_process_batch": batch,
                })
                bar.advance(task)
    return runs


def summarise(runs: dict[str, list[dict]], labels: list[str]) -> dict:
    """Medians over the rounds; int8 over fp32 per checkpoint; each model over the first
    checkpoint's model of the same precision, paired per round (both served by one server)."""
    summary: dict = {}
    for name, entries in runs.items():
        served = statistics.median(e["throughput"] for e in entries)
        local = statistics.median(e["in_process_throughput"] for e in entries)
        summary[name] = {"served_texts_per_s": served, "in_process_texts_per_s": local,
                         "served_over_in_process": served / local,
                         "p95_ms": statistics.median(e["p95_ms"] for e in entries)}
    for label in labels:
        fp32, int8 = summary[f"{label}_fp32"], summary[f"{label}_int8"]
        summary[label] = {"int8_over_fp32_served": (int8["served_texts_per_s"]
                                                    / fp32["served_texts_per_s"])}
        for precision in ("fp32", "int8"):
            mine, first = runs[f"{label}_{precision}"], runs[f"{labels[0]}_{precision}"]
            summary[label][f"{precision}_served_over_{labels[0]}"] = statistics.median(
                a["throughput"] / b["throughput"] for a, b in zip(mine, first, strict=True))
    return summary


def plot(summary: dict, names: list[str], concurrency: int, path: Path) -> None:
    """Served and in-process texts/s per model, side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(max(6, 1.4 * len(names)), 4))
    positions = range(len(names))
    axis.bar([p - 0.2 for p in positions], [summary[n]["served_texts_per_s"] for n in names],
             width=0.4, label="served (Triton, gRPC)")
    axis.bar([p + 0.2 for p in positions], [summary[n]["in_process_texts_per_s"] for n in names],
             width=0.4, label="in-process onnxruntime, same batch")
    axis.set_xticks(list(positions), names, rotation=20)
    axis.set_ylabel("texts/s (median over rounds)")
    axis.set_title(f"Fine-tuned MiniLM text models at concurrency {concurrency}")
    axis.legend()
    figure.tight_layout()
    atomic_write_png(figure, path)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", action="append", required=True, metavar="[LABEL=]PATH")
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--window", type=float, default=5.0)
    parser.add_argument("--exclude-worst", default="0", metavar="N or LABEL=N,...",
                        help="quantize --exclude-worst: one N for every checkpoint, or one per "
                             "label, 0 where none is named (per-row scales keep 99 %% of every "
                             "MiniLM variant's labels with N = 0 on a CPU with VNNI; per batch "
                             "needs 1-4: quantize_sweep.py)")
    parser.add_argument("--reduce-range", default="", metavar="LABEL,...",
                        help="quantize these checkpoints with --reduce-range (7-bit weights)")
    parser.add_argument("--activations", choices=ACTIVATIONS, default=None,
                        help="quantize --activations (default: quantize's, per row; the tables "
                             "before 2026-12-05 were measured per batch)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results")
    args = parser.parse_args()
    checkpoints = checkpoint_labels(args.checkpoint)
    reduced = {label for label in args.reduce_range.split(",") if label}
    work = Path(tempfile.mkdtemp(prefix="attndeploy-served-int8-"))
    try:
        texts_file = held_out_file(args.data, work / "held_out.jsonl", 128)
        lines = work / "texts.txt"
        lines.write_text("".join(json.loads(row)["text"] + "\n"
                                 for row in texts_file.read_text().splitlines()))
        repo, models, quantized = work / "repo", {}, {}
        for label, checkpoint in checkpoints.items():
            options = {"exclude_worst": exclude_worst_for(args.exclude_worst, label),
                       "reduce_range": label in reduced, "activations": args.activations}
            served, quantized[label] = prepare(label, checkpoint, texts_file, repo, work,
                                               options)
            models.update(served)
        load_before = os.getloadavg()
        runs = measure_rounds(models, repo, lines, work, args)
        load_after = os.getloadavg()
    finally:  # the exports, the repository and the server log
        shutil.rmtree(work, ignore_errors=True)
    summary = summarise(runs, list(checkpoints))
    report = {"benchmark": "served_int8",
              "checkpoints": {label: str(path) for label, path in checkpoints.items()},
              "concurrency": args.concurrency, "rounds": args.rounds,
              "load_average_before": load_before, "load_average_after": load_after,
              "quantize": quantized, "runs": runs, "summary": summary}
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "served_int8.json", json.dumps(report, indent=2) + "\n")
    plot(summary, list(models), args.concurrency, args.out / "served_int8.png")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
