"""What else a text's int8 answer depends on: the texts batched with it.

    .venv/bin/python benchmarks/int8_batching.py --checkpoint [LABEL=]CKPT [--checkpoint ...]
        [--exclude-worst LABEL=N,...] [--batch 8] [--rounds 30] [--out DIR]

onnxruntime's dynamic quantization (`attndeploy quantize --activations per-batch`) quantizes each
MatMul's activations with one scale over the whole input, so a text's int8 logits move with the
texts batched with it. Per checkpoint (a `train --hf-model` one; LABEL defaults to its folder's
name) this exports fp32, makes the held-out texts again (`attndeploy.data.held_out`) and
quantizes twice (per channel, the label's `--exclude-worst`): activations scaled per batch and
per row (quantize's default since 2026-12-05: each token's own scale and zero point). For
fp32 and both int8 files it measures:
- each held-out text alone against inside seeded random batches of `--batch`: the largest and
  99th-percentile logit move, and the labels and GA-Net gates that change;
- labels equal to fp32 and held-out accuracy (predict's own batching);
- time per call at 1x16, 8x16, 8x128 and 32x32 random ids, interleaved, median over `--rounds`,
  with `--threads` intra-op threads that do not spin (a spinning pool keeps the cores busy after
  `run()` returns and slows whichever file runs next: on 2 cores that tripled some calls and
  turned the ratios into noise; benchmarks/README.md, "How it measures").
Writes `int8_batching.json` (with the CPU and the load) and `int8_batching.png`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from latency import cpu_description  # noqa: E402
from real_speed import per_label_counts  # noqa: E402
from served_int8 import checkpoint_labels  # noqa: E402

from attndeploy.fsutil import atomic_write_png, atomic_write_text  # noqa: E402

SHAPES = ((1, 16), (8, 16), (8, 128), (32, 32))  # (batch, seq) of the timed calls


def batch_dependence(model: Any, texts: list[str], batch: int, seed: int) -> dict[str, Any]:
    """Each text alone against inside seeded random batches of `batch`."""
    alone = [model.predict([text], truncate=True)[0] for text in texts]
    inside: list[Any] = [None] * len(texts)
    order = np.random.default_rng(seed).permutation(len(texts))
    for start in range(0, len(texts), batch):
        rows = order[start:start + batch]
        for row, prediction in zip(rows, model.predict([texts[i] for i in rows],
                                                       truncate=True), strict=True):
            inside[row] = prediction
    moves = np.array([float(np.abs(a.logits - b.logits).max()) for a, b in zip(alone, inside,
                                                                              strict=True)])
    changed = [(a, b) for a, b in zip(alone, inside, strict=True) if a.label != b.label]
    gates = sum(int(np.count_nonzero(np.asarray(a.gates) != np.asarray(b.gates)))
                for a, b in zip(alone, inside, strict=True) if a.gates is not None)
    return {"max_logit_move": float(moves.max()), "p99_logit_move": float(np.quantile(moves, 0.99)),
            "median_logit_move": float(np.median(moves)), "labels_changed": len(changed),
            "changed_margins": [float(np.diff(np.sort(a.logits)[-2:])[0]) for a, _ in changed],
            "gates_changed": gates, "texts": len(texts)}


def agreement(model: Any, texts: list[str], gold: list[str], fp32_labels: list[str] | None
              ) -> tuple[list[str], dict[str, Any]]:
    labels = [p.label for p in model.predict(texts, truncate=True)]
    out = {"accuracy": float(np.mean([a == b for a, b in zip(labels, gold, strict=True)]))}
    if fp32_labels is not None:
        out["labels_equal_fp32"] = float(np.mean([a == b for a, b in zip(labels, fp32_labels,
                                                                         strict=True)]))
    return labels, out


def timings(models: dict[str, Any], rounds: int, seed: int) -> dict[str, dict[str, float]]:
    """Median ms per call of each model at each shape, the models interleaved in every round."""
    rng = np.random.default_rng(seed)
    out: dict[str, dict[str, float]] = {}
    for batch, seq in SHAPES:
        ids = rng.integers(1000, 20000, (batch, seq)).astype(np.int64)  # [B, T]
        mask = np.ones_like(ids)  # [B, T]
        times: dict[str, list[float]] = {name: [] for name in models}
        for model in models.values():
            model.run(ids, mask)  # warm
        for _ in range(rounds):
            for name, model in models.items():
                begin = time.perf_counter()
                model.run(ids, mask)
                times[name].append(time.perf_counter() - begin)
        out[f"{batch}x{seq}"] = {name: float(np.median(t) * 1e3) for name, t in times.items()}
    return out


def measure(label: str, checkpoint: Path, exclude_worst: int, args: argparse.Namespace,
            work: Path) -> dict[str, Any]:
    from attndeploy.checkpoint import read_config
    from attndeploy.data.held_out import held_out_of
    from attndeploy.export.exporter import export_checkpoint
    from attndeploy.quantize import QuantizeOptions, quantize_model
    from attndeploy.runtime import InferenceModel
    from attndeploy.runtime.sessions import session_options

    config = read_config(checkpoint)
    held = held_out_of(config["data"], max_seq=config["model"]["max_seq"], hf="hf" in config)
    texts, gold = [t for t, _ in held.examples], [g for _, g in held.examples]
    (work / f"{label}.jsonl").write_text(held.to_jsonl())
    files = {"fp32": work / f"{label}.onnx", "int8": work / f"{label}.int8.onnx",
             "int8 per row": work / f"{label}.int8_rows.onnx"}
    export_checkpoint(checkpoint, files["fp32"])
    for name, activations in (("int8", "per-batch"), ("int8 per row", "per-row")):
        quantize_model(files["fp32"], files[name], QuantizeOptions(
            exclude_worst=exclude_worst, activations=activations, min_agreement=0.0,
            max_accuracy_drop=1.0, max_logit_change=1e9), data=work / f"{label}.jsonl")
    options = session_options(threads=args.threads, spinning=False)
    models = {name: InferenceModel(path, session_options=options) for name, path in files.items()}
    fp32_labels = None
    result: dict[str, Any] = {"checkpoint": str(checkpoint), "exclude_worst": exclude_worst,
                              "held_out": held.origin, "models": {}}
    for name, model in models.items():
        labels, scores = agreement(model, texts, gold, fp32_labels)
        fp32_labels = fp32_labels or labels
        result["models"][name] = {**scores, **batch_dependence(model, texts, args.batch,
                                                               args.seed)}
        print(f"{label} {name}: {json.dumps(result['models'][name])}", flush=True)
    result["ms_per_call"] = timings(models, args.rounds, args.seed)
    for shape, row in result["ms_per_call"].items():
        print(f"{label} {shape}: " + ", ".join(f"{k} {v:.2f} ms" for k, v in row.items())
              + f"; per row / int8 {row['int8 per row'] / row['int8']:.2f}x", flush=True)
    return result


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 2, figsize=(11, 3.6 * len(results)), squeeze=False)
    for row, (label, result) in enumerate(results.items()):
        names = list(result["models"])
        moved, speed = axes[row]
        moved.bar(names, [result["models"][n]["labels_changed"] for n in names],
                  color=["grey", "tab:red", "tab:blue"])
        moved.set_title(f"{label}: labels that change alone vs in a batch")
        moved.set_ylabel(f"of {result['models'][names[0]]['texts']} held-out texts")
        shapes = list(result["ms_per_call"])
        x = np.arange(len(shapes))
        for i, name in enumerate(names):
            speed.bar(x + (i - 1) * 0.27, [result["ms_per_call"][s][name] for s in shapes],
                      0.27, label=name)
        speed.set_xticks(x, shapes)
        speed.set_ylabel("ms per call (median)")
        speed.set_title(f"{label}: time per call, batch x seq")
        speed.legend()
    fig.tight_layout()
    atomic_write_png(fig, path)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", action="append", required=True, metavar="[LABEL=]PATH")
    parser.add_argument("--exclude-worst", default="", help="LABEL=N,... (default 0)")
    parser.add_argument("--batch", type=int, default=8, help="texts per random batch")
    parser.add_argument("--rounds", type=int, default=30, help="timed calls per shape")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()
    worst = per_label_counts(args.exclude_worst)
    report: dict[str, Any] = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "cpu": cpu_description(), "load_before": os.getloadavg(), "batch": args.batch,
        "threads": args.threads, "spinning": False,
        "results": {}}
    with tempfile.TemporaryDirectory(prefix="int8-batching-") as scratch:
        for label, checkpoint in checkpoint_labels(args.checkpoint).items():
            report["results"][label] = measure(label, checkpoint, worst.get(label, 0), args,
                                               Path(scratch))
    report["load_after"] = os.getloadavg()
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "int8_batching.json", json.dumps(report, indent=2) + "\n")
    plot(report["results"], args.out / "int8_batching.png")
    print(f"wrote {args.out / 'int8_batching.json'} and int8_batching.png")


if __name__ == "__main__":
    main()
