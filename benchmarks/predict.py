"""In-process predict: `InferenceModel.predict` against a hand-written loop over one session.

What it answers: does the convenience cost throughput? Target: over 2000 lines, predict's
throughput is at least 0.9x that of the loop a user writes by hand today, at the same batch size,
on the same model with the same onnxruntime settings.

Model: the quickstart's model per variant (task sparse_evidence, max_seq 64, d_model 64,
2 layers; `attndeploy.quickstart.pipeline.train_or_reuse` / `export_or_reuse`), trained for
`--train-steps` steps (default 300, 60 s at most; `--quick` 30) and cached in `--workdir`.
Throughput does not depend on the weights.

Texts: `--texts FILE` (one text a line; its first `--lines` lines), else `--lines` texts of the
built-in task (`example_texts("sparse_evidence", n, seed)`: 16-64 words each, uniform). No real
corpus ships with the project, so the default is the task's text; say so when quoting numbers.

Contenders, each over all the lines, at each `--batch-sizes` value:
- `predict`: `InferenceModel(path, session_options=...).predict(lines, batch_size=B)`: sorts by
  length, pads each batch to its longest text, decodes labels, softmax scores and (GA-Net) the
  attended tokens, returns Predictions in input order.
- `hand`: what a user writes today against one `ort.InferenceSession`: the tokenizer and labels
  read from the metadata by hand (`json.loads`), the texts in input order in chunks of B, each
  tokenized with the same regex and vocabulary, right-padded with numpy, run, then softmax,
  argmax label and (GA-Net) open-gate tokens per row. Same outputs as `predict`; the benchmark
  checks that every label agrees before it times anything.
- `session_only` (reference, not a contender): `session.run` alone on predict's own padded
  batches, prepared beforehand: the floor that any Python around the model adds to.

Both sessions get the same options: `--threads` intra-op threads (default 1), inter-op 1, no
spinning (`session.intra_op.allow_spinning = 0`, so one contender's idle pool does not steal the
next one's cores), errors-only logging. After one warm-up pass of each contender, `--rounds`
rounds (default 7) each run every (contender, batch size) once in a fresh random order; the
statistic is the median over rounds, the ratio `predict / hand` a ratio of medians, with the
median of the per-round ratios (`paired_median`) beside it.

Run: `.venv/bin/python benchmarks/predict.py [--quick] [--variants standard,ganet]
[--batch-sizes 1,8,32,128] [--threads 1] [--rounds 7] [--lines 2000] [--texts FILE]
[--out DIR] [--workdir DIR]`. Writes DIR/predict.json and DIR/predict.png
(DIR defaults to benchmarks/results/).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python benchmarks/predict.py` from a checkout
    sys.path.insert(0, str(ROOT))

from attndeploy.fsutil import atomic_write_png, atomic_write_text  # noqa: E402

TARGET = 0.9  # predict throughput / hand-written loop throughput
TASK = "sparse_evidence"
CONTENDERS = ("predict", "hand", "session_only")


# --------------------------------------------------------------------------- setup


def prepare_model(variant: str, workdir: Path, steps: int, max_seconds: float) -> dict[str, Any]:
    """Train (or reuse) and export the quickstart's model of `variant`."""
    from attndeploy.quickstart.pipeline import (
        QuickstartOptions,
        export_or_reuse,
        train_or_reuse,
    )

    options = QuickstartOptions(workdir=workdir, variants=(variant,), steps=steps,
                                max_train_seconds=max_seconds)
    ckpt = workdir / "checkpoints" / f"{variant}-steps{steps}"
    onnx_path = workdir / "onnx" / f"{variant}-steps{steps}.onnx"
    metrics, reused_ckpt, train_s = train_or_reuse(variant, ckpt, options, print, False)
    reused_onnx, export_s = export_or_reuse(variant, ckpt, onnx_path, print)
    config = json.loads((ckpt / "config.json").read_text())
    return {"variant": variant, "onnx": str(onnx_path), "train_steps": steps,
            "reused_checkpoint": reused_ckpt, "reused_export": reused_onnx,
            "train_seconds": train_s, "export_seconds": export_s, "metrics": metrics,
            "model_config": config.get("model")}


def session_options(threads: int) -> Any:
    from attndeploy.runtime.sessions import session_options as ort_options

    return ort_options(threads=threads, spinning=False)


def load_texts(path: Path | None, n: int, seed: int) -> tuple[list[str], str]:
    if path is not None:
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        return lines[:n], f"file {path}"
    from attndeploy.data import example_texts

    return example_texts(TASK, n, seed=seed), f"built-in task {TASK!r} (seed {seed})"


# --------------------------------------------------------------------------- the hand loop


class HandLoop:
    """The loop a user writes by hand today: everything read from the metadata with json."""

    TOKEN_RE = re.compile(r"\w+|[^\w\s]")

    def __init__(self, path: str, options: Any) -> None:
        from attndeploy.runtime.sessions import create_session

        self.session = create_session(path, options)
        meta = self.session.get_modelmeta().custom_metadata_map
        vocab = json.loads(meta["attndeploy.tokenizer"])["vocab"]
        self.ids = {word: i for i, word in enumerate(vocab)}
        self.labels = json.loads(meta["attndeploy.labels"])
        self.outputs = [o.name for o in self.session.get_outputs()]
        self.gated = "gates" in self.outputs

    def __call__(self, texts: list[str], batch_size: int) -> list[dict[str, Any]]:
        results = []
        for start in range(0, len(texts), batch_size):
            tokens = [self.TOKEN_RE.findall(t.lower()) for t in texts[start : start + batch_size]]
            width = max(len(t) for t in tokens)
            input_ids = np.zeros((len(tokens), width), dtype=np.int64)
            attention_mask = np.zeros((len(tokens), width), dtype=np.int64)
            for row, toks in enumerate(tokens):
                input_ids[row, : len(toks)] = [self.ids.get(tok, 1) for tok in toks]
                attention_mask[row, : len(toks)] = 1
            arrays = self.session.run(self.outputs, {"input_ids": input_ids,
                                                     "attention_mask": attention_mask})
            logits = arrays[0]
            scores = np.exp(logits - logits.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            for row, toks in enumerate(tokens):
                result = {"label": self.labels[int(scores[row].argmax())], "scores": scores[row]}
                if self.gated:
                    gates = arrays[1][row]
                    result["attended"] = [tok for tok, g in zip(toks, gates, strict=False) if g]
                results.append(result)
        return results


def predict_batches(model: Any, texts: list[str], batch_size: int) -> list[dict[str, Any]]:
    """predict's own padded batches, built beforehand for `session_only`."""
    from attndeploy.runtime.text import encode_texts
    from attndeploy.runtime.tokenizer import pad_sequences

    encoded = encode_texts(model.tokenizer, texts, max_seq=model.max_seq)
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i].ids))
    feeds = []
    for start in range(0, len(order), batch_size):
        ids, mask = pad_sequences([encoded[i].ids for i in order[start : start + batch_size]])
        feeds.append({"input_ids": ids, "attention_mask": mask})
    return feeds


def padding(lengths: list[int], batch_size: int, sort: bool) -> float:
    """Share of padding cells in the batches (sorted by length, or in input order)."""
    ordered = sorted(lengths) if sort else lengths
    cells = sum(len(chunk) * max(chunk) for chunk in
                (ordered[i : i + batch_size] for i in range(0, len(ordered), batch_size)))
    return 1.0 - sum(lengths) / cells


# --------------------------------------------------------------------------- measuring


def run_variant(facts: dict[str, Any], texts: list[str], args: argparse.Namespace
                ) -> dict[str, Any]:
    from attndeploy.runtime import InferenceModel

    model = InferenceModel(facts["onnx"], session_options=session_options(args.threads))
    hand = HandLoop(facts["onnx"], session_options(args.threads))
    predictions = model.predict(texts, batch_size=32)
    by_hand = hand(texts, 32)
    disagree = sum(p.label != h["label"] for p, h in zip(predictions, by_hand, strict=True))
    if model.gated:
        disagree += sum(p.attended != h["attended"]
                        for p, h in zip(predictions, by_hand, strict=True))
    if disagree:
        raise SystemExit(f"{facts['variant']}: predict and the hand loop disagree on "
                         f"{disagree} texts; not timing")
    feeds = {b: predict_batches(model, texts, b) for b in args.batch_sizes}
    names = model.output_names

    def once(contender: str, batch_size: int) -> float:
        started = time.perf_counter()
        if contender == "predict":
            model.predict(texts, batch_size=batch_size)
        elif contender == "hand":
            hand(texts, batch_size)
        else:
            for feed in feeds[batch_size]:
                model.session.run(names, feed)
        return time.perf_counter() - started

    jobs = [(c, b) for c in CONTENDERS for b in args.batch_sizes]
    for job in jobs:  # warm-up
        once(*job)
    seconds: dict[tuple[str, int], list[float]] = {job: [] for job in jobs}
    rng = random.Random(args.seed)
    for round_index in range(args.rounds):
        rng.shuffle(jobs)
        for job in jobs:
            seconds[job].append(once(*job))
        print(f"  {facts['variant']}: round {round_index + 1}/{args.rounds} done", flush=True)
    lengths = [len(e) for e in (HandLoop.TOKEN_RE.findall(t.lower()) for t in texts)]
    per_batch = {}
    for b in args.batch_sizes:
        entry: dict[str, Any] = {}
        for c in CONTENDERS:
            runs = seconds[(c, b)]
            entry[c] = {"seconds": runs, "median_s": statistics.median(runs),
                        "lines_per_s": len(texts) / statistics.median(runs)}
        ratio = entry["predict"]["lines_per_s"] / entry["hand"]["lines_per_s"]
        paired = statistics.median(h / p for p, h in zip(seconds[("predict", b)],
                                                         seconds[("hand", b)], strict=True))
        entry["ratio_predict_over_hand"] = {"value": ratio, "paired_median": paired,
                                            "target": TARGET, "met": ratio >= TARGET}
        entry["overhead_over_session_ms"] = 1000 * (entry["predict"]["median_s"]
                                                    - entry["session_only"]["median_s"])
        entry["padding_fraction"] = {"predict_sorted": padding(lengths, b, True),
                                     "hand_input_order": padding(lengths, b, False)}
        per_batch[str(b)] = entry
    return {"model": facts, "batch_sizes": per_batch}


def machine() -> dict[str, Any]:
    import onnxruntime as ort

    return {"platform": platform.platform(), "python": sys.version.split()[0],
            "cpu_count": os.cpu_count(), "load_average_start": list(os.getloadavg()),
            "versions": {"onnxruntime": ort.__version__, "numpy": np.__version__}}


# --------------------------------------------------------------------------- output


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = report["variants"]
    fig, axes = plt.subplots(1, len(variants) + 1, figsize=(5 * (len(variants) + 1), 4.5))
    sizes = [str(b) for b in report["settings"]["batch_sizes"]]
    x = np.arange(len(sizes))
    width = 0.27
    colors = {"predict": "tab:blue", "hand": "tab:orange", "session_only": "tab:gray"}
    for ax, (variant, result) in zip(axes[:-1], variants.items(), strict=True):
        for k, c in enumerate(CONTENDERS):
            values = [result["batch_sizes"][b][c]["lines_per_s"] for b in sizes]
            ax.bar(x + (k - 1) * width, values, width, label=c, color=colors[c])
        ax.set_xticks(x, sizes)
        ax.set_xlabel("batch size")
        ax.set_ylabel("lines / s (median over rounds)")
        ax.set_title(f"{variant}")
        ax.legend(fontsize=8)
    ratio_ax = axes[-1]
    for variant, result in variants.items():
        ratio_ax.plot(sizes, [result["batch_sizes"][b]["ratio_predict_over_hand"]["value"]
                              for b in sizes], "-o", label=variant)
    ratio_ax.axhline(TARGET, color="k", linestyle="--", label=f"target >= {TARGET:g}")
    ratio_ax.set_xlabel("batch size")
    ratio_ax.set_ylabel("predict / hand throughput")
    ratio_ax.set_title("ratio of medians")
    ratio_ax.legend(fontsize=8)
    settings = report["settings"]
    fig.suptitle(f"InferenceModel.predict vs a hand-written onnxruntime loop: "
                 f"{settings['lines']} lines ({settings['texts']}), {settings['threads']} "
                 f"thread(s), {report['machine']['cpu_count']} CPU cores, "
                 f"{settings['rounds']} rounds", fontsize=10)
    fig.tight_layout()
    atomic_write_png(fig, path, dpi=110)
    plt.close(fig)


def print_table(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="predict vs hand-written loop (lines/s, medians over rounds)")
    for column in ("variant", "batch", "predict", "hand", "session only", "ratio", "paired",
                   "pad sorted", "pad input order", "target"):
        table.add_column(column, justify="right")
    for variant, result in report["variants"].items():
        for b, e in result["batch_sizes"].items():
            r = e["ratio_predict_over_hand"]
            table.add_row(variant, b, f"{e['predict']['lines_per_s']:.0f}",
                          f"{e['hand']['lines_per_s']:.0f}",
                          f"{e['session_only']['lines_per_s']:.0f}", f"{r['value']:.2f}",
                          f"{r['paired_median']:.2f}",
                          f"{100 * e['padding_fraction']['predict_sorted']:.0f} %",
                          f"{100 * e['padding_fraction']['hand_input_order']:.0f} %",
                          "met" if r["met"] else "MISSED")
    Console(width=140).print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="checkpoints and ONNX files (default OUT/predict_work)")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 30 training steps, 3 rounds, batch sizes 1,32")
    parser.add_argument("--variants", default="standard,ganet")
    parser.add_argument("--batch-sizes", default=None, help="default 1,8,32,128")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--texts", type=Path, default=None, help="one text a line")
    parser.add_argument("--train-steps", type=int, default=None)
    parser.add_argument("--max-train-seconds", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.batch_sizes = [int(b) for b in (args.batch_sizes or ("1,32" if args.quick
                                                              else "1,8,32,128")).split(",")]
    args.rounds = args.rounds or (3 if args.quick else 7)
    args.train_steps = args.train_steps or (30 if args.quick else 300)
    workdir = args.workdir or args.out / "predict_work"
    started = time.perf_counter()
    report: dict[str, Any] = {"benchmark": "predict", "date": dt.datetime.now(dt.timezone.utc)
                              .isoformat(timespec="seconds"), "machine": machine()}
    texts, source = load_texts(args.texts, args.lines, args.seed)
    report["settings"] = {"variants": args.variants.split(","), "batch_sizes": args.batch_sizes,
                          "threads": args.threads, "rounds": args.rounds, "lines": len(texts),
                          "texts": source, "train_steps": args.train_steps,
                          "target": f"predict / hand >= {TARGET}"}
    report["variants"] = {}
    for variant in args.variants.split(","):
        facts = prepare_model(variant, workdir, args.train_steps, args.max_train_seconds)
        report["variants"][variant] = run_variant(facts, texts, args)
    report["all_met"] = all(e["ratio_predict_over_hand"]["met"]
                            for v in report["variants"].values()
                            for e in v["batch_sizes"].values())
    report["load_average_end"] = list(os.getloadavg())
    report["seconds"] = round(time.perf_counter() - started, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "predict.json", json.dumps(report, indent=2) + "\n")
    plot(report, args.out / "predict.png")
    print_table(report)
    print(f"every target met: {report['all_met']}; wrote {args.out / 'predict.json'} and "
          f"{args.out / 'predict.png'}")


if __name__ == "__main__":
    main()
