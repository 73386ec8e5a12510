"""Translation (issue #51): train one encoder-decoder per variant on `translation.jsonl`
(`benchmarks/translation_data.py`) and measure held-out BLEU and chrF beside the copy and
TF-IDF retrieval baselines; the same code path as `attndeploy train --data FILE --variant V`.

Each run: the fixed held-out split (`--eval-fraction`), a shared BPE (`--vocab`), d_model 128,
4 heads, 2 encoder + 2 decoder layers, FFN 256, dropout 0.1, batch `--batch-size` (48),
AdamW (peak 2e-3, warm-up 100 steps, cosine to 0 at the step or time budget), label smoothing
0.1, one torch thread; greedy decoding of every held-out source. Writes
OUT/translation_<variant>_s<seed>.json (metrics, summary) and, at the end,
OUT/translation.json with every run and a bar chart OUT/translation.png.

Run: `.venv/bin/python benchmarks/translation.py --data translation.jsonl
[--variants standard,qvi,ganet,evolving] [--seeds 0] [--max-seconds 510] [--steps 20000]
[--vocab 4000] [--batch-size 48] [--qvi-cross-form pooled] [--out benchmarks/results]`.

A time budget measures the machine's load as much as the variant: on shared cores a run makes a
third of the steps it would make alone. `--calibrate` times `--calibrate-steps` training steps
per variant (after the BPE and a 20-step warm-up; run it on a quiet machine, one variant per
core) and writes OUT/translation_calibration_<variant>.json; `--quiet-seconds S --calibration
DIR` (that OUT) then
gives each variant the steps a quiet core makes in S seconds, with no time cap, so the result no
longer depends on what else the machine runs (only how long it takes does).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def model_config(variant: str, qvi_cross_form: str) -> dict:
    """The benchmark's model size (QVI: with its cross-attention form)."""
    config = {"variant": variant, "d_model": 128, "n_heads": 4, "encoder_layers": 2,
              "decoder_layers": 2, "d_ff": 256, "max_source": 48, "max_target": 48}
    if variant == "qvi":
        config["qvi_cross_form"] = qvi_cross_form
    return config


def run(data: Path, variant: str, seed: int, max_seconds: float | None, steps: int, vocab: int,
        eval_fraction: float, batch_size: int, qvi_cross_form: str) -> dict:
    import torch

    from attndeploy.families.translation.training import read_pairs
    from attndeploy.models.seq2seq.fit import FitOptions, fit_translation

    torch.set_num_threads(1)
    pairs = read_pairs(data)
    config = model_config(variant, qvi_cross_form)
    options = FitOptions(steps=steps, max_seconds=max_seconds, seed=seed, vocab_size=vocab,
                         eval_fraction=eval_fraction, batch_size=batch_size)
    result = fit_translation(pairs, config, options)
    return {"variant": variant, "seed": seed, "config": config,
            "metrics": result.metrics, "summary": result.summary}


def calibrate(data: Path, variant: str, steps: int, vocab: int, batch_size: int,
              eval_fraction: float, qvi_cross_form: str) -> dict:
    """Seconds per training step of `variant` at the benchmark's size, one torch thread: the
    mean over `steps` steps after 20 warm-up steps (the BPE is not timed)."""
    import random
    import time

    import torch

    from attndeploy.families.translation.training import read_pairs
    from attndeploy.models.seq2seq import fit
    from attndeploy.models.seq2seq.config import Seq2SeqConfig
    from attndeploy.models.seq2seq.model import Seq2Seq, label_smoothed_loss
    from attndeploy.models.seq2seq.pairs import split_pairs
    from attndeploy.models.seq2seq.tokenizer import encode_source, encode_target, train_bpe

    torch.set_num_threads(1)
    train, _ = split_pairs(read_pairs(data), eval_fraction)
    tokenizer = train_bpe([text for pair in train for text in pair], vocab)
    config = Seq2SeqConfig(vocab_size=len(tokenizer), **model_config(variant, qvi_cross_form))
    torch.manual_seed(0)
    model = Seq2Seq(config)
    rows = [(encode_source(tokenizer, s, 48), encode_target(tokenizer, t, 48)) for s, t in train]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    rng, batches = random.Random(0), []
    model.train()
    started = None
    for step in range(20 + steps):
        if step == 20:
            started = time.perf_counter()
        if not batches:  # a new epoch, as training draws them
            batches = fit._buckets(rows, batch_size, rng)
        src, src_mask, dec, dec_mask, labels = fit._batch([rows[i] for i in batches.pop()])
        loss = label_smoothed_loss(model(src, src_mask, dec, dec_mask), labels, 0.1, fit.IGNORE)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    seconds = (time.perf_counter() - started) / steps
    return {"variant": variant, "seconds_per_step": round(seconds, 4), "steps_timed": steps,
            "batch_size": batch_size, "config": model_config(variant, qvi_cross_form)}


def plot(runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 3.5))
    names = [f"{r['variant']} s{r['seed']}" for r in runs]
    axis.bar(names, [r["metrics"]["bleu"] for r in runs], color="tab:blue", label="model")
    axis.axhline(runs[0]["metrics"]["baseline_bleu"], color="tab:red", linestyle="--",
                 label="TF-IDF retrieval")
    axis.axhline(runs[0]["metrics"]["copy_bleu"], color="gray", linestyle=":",
                 label="copy the source")
    axis.set_ylabel("held-out BLEU")
    axis.set_title("German→English, greedy decoding")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--variants", default="standard,qvi,ganet,evolving")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--max-seconds", type=float, default=510.0)
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--vocab", type=int, default=4000)
    parser.add_argument("--batch-size", type=int, default=48)
    parser.add_argument("--eval-fraction", type=float, default=0.05)
    parser.add_argument("--qvi-cross-form", choices=("pooled", "pairwise"), default="pooled",
                        help="QVI's cross-attention form (the model's default: pooled)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--collect", action="store_true",
                        help="only gather the per-run files into translation.json and the PNG")
    parser.add_argument("--calibrate", action="store_true",
                        help="only time each variant's training step (on a quiet machine)")
    parser.add_argument("--calibrate-steps", type=int, default=150)
    parser.add_argument("--calibration", type=Path,
                        help="the folder of a --calibrate run: with --quiet-seconds, each "
                             "variant's step budget")
    parser.add_argument("--quiet-seconds", type=float,
                        help="train each variant for the steps a quiet core makes in this time")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    variants, seeds = args.variants.split(","), [int(s) for s in args.seeds.split(",")]
    if args.calibrate:
        timings = [calibrate(args.data, v, args.calibrate_steps, args.vocab, args.batch_size,
                             args.eval_fraction, args.qvi_cross_form) for v in variants]
        for timing in timings:
            print(json.dumps(timing))
            (args.out / f"translation_calibration_{timing['variant']}.json").write_text(
                json.dumps(timing, indent=2) + "\n")
        return 0
    budgets = {}
    if args.quiet_seconds is not None:
        if args.calibration is None:
            parser.error("--quiet-seconds needs --calibration (a --calibrate run's files' folder)")
        for variant in variants:
            timing = json.loads(
                (args.calibration / f"translation_calibration_{variant}.json").read_text())
            timed = timing.get("config", {}).get("qvi_cross_form", "pairwise")
            if variant == "qvi" and timed != args.qvi_cross_form:
                parser.error(f"the calibration timed QVI with {timed} cross-attention, not "
                             f"{args.qvi_cross_form}: calibrate it again")
            budgets[variant] = int(args.quiet_seconds / timing["seconds_per_step"])
    runs = []
    for variant in variants:
        for seed in seeds:
            path = args.out / f"translation_{variant}_s{seed}.json"
            if not args.collect:
                steps = budgets.get(variant, args.steps)
                max_seconds = None if variant in budgets else args.max_seconds
                record = run(args.data, variant, seed, max_seconds, steps, args.vocab,
                             args.eval_fraction, args.batch_size, args.qvi_cross_form)
                if variant in budgets:
                    record["budget"] = {"quiet_seconds": args.quiet_seconds, "steps": steps}
                path.write_text(json.dumps(record, indent=2) + "\n")
                print(json.dumps({k: record[k] for k in ("variant", "seed", "metrics")}))
            if path.is_file():
                runs.append(json.loads(path.read_text()))
    if runs:
        (args.out / "translation.json").write_text(json.dumps(runs, indent=2) + "\n")
        plot(runs, args.out / "translation.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
