"""Generation speed of small trained decoders, every variant, in process (issue #49, "Speed").

For each variant a small causal LM (`attndeploy.models.decoder`) is trained for `--steps` on
`--data` ({"text"} lines; default: synthetic sentences from a fixed grammar), exported with its
cache (`attndeploy.export.decoder`) and run by the in-process loop's graph calls
(`attndeploy.generation.DecoderModel.step`, onnxruntime CPU, `--threads` intra-op, batch 1).
Measured, in `--rounds` rounds that visit the variants in a fresh random order each time
(medians over the rounds):

- `decode_step_ms[context]`: one decode step after a prompt of `context` tokens, with the cache
  (one new token against the cached past) and without it (the whole context + 1 recomputed
  from the empty past, what a loop without a cache pays every step);
- `tokens_per_s`: a 32-token prompt then `--new-tokens` greedy steps (no stop at <eos>), new
  tokens over the wall time, and each variant's ratio to standard's;
- `time_to_first_token_ms`: the 32-token prompt's prefill and the first choice;
- `ganet_cache`: GA-Net's cache bytes and gate density on the held-out texts as the gate
  network's score bias is shifted so that the gates close at the 0, 25, 50, 75 and 90 %
  quantiles of the trained scores (PyTorch, hard gates), beside standard's bytes for the same
  tokens: the cache follows the density. (The decoder trains with no density penalty, so its
  own gates stay open: these are thresholds moved after training.)

Run: `.venv/bin/python benchmarks/generation.py [--variants standard,qvi,ganet,evolving]
[--steps 150] [--rounds 3] [--threads 2] [--new-tokens 64] [--data FILE]
[--ganet-density-target D] [--out DIR]`.
Writes DIR/generation.json (DIR defaults to benchmarks/results/).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attndeploy.export.decoder import export_decoder  # noqa: E402
from attndeploy.fsutil import atomic_write_text  # noqa: E402
from attndeploy.generation.loop import DecoderModel, positions  # noqa: E402
from attndeploy.models.decoder.fit import FitOptions, fit_decoder, split_texts  # noqa: E402

PROMPT = 32


def synthetic_texts(count: int = 600, seed: int = 0) -> list[str]:
    """Sentences of a small grammar: enough structure for a model to learn in seconds."""
    r = random.Random(seed)
    subj = ["the cat", "a dog", "the bird", "my friend", "the teacher", "a child", "the farmer"]
    verb = ["sees", "likes", "finds", "follows", "watches", "carries", "paints"]
    obj = ["the ball", "a tree", "the house", "some bread", "the river", "a book", "the boat"]
    tail = ["today", "at night", "in the park", "with joy", "again", "near the hill"]
    texts = []
    for _ in range(count):
        parts = [f"{r.choice(subj)} {r.choice(verb)} {r.choice(obj)} {r.choice(tail)}."
                 for _ in range(r.randint(1, 4))]
        texts.append(" then ".join(parts))
    return texts


def _ids(vocab: int, length: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.concatenate([[2], rng.integers(4, vocab, length - 1)])[None, :].astype(np.int64)


def _prefill(model: DecoderModel, ids: np.ndarray):
    mask = np.ones_like(ids)
    return model.step(ids, mask, positions(mask), model.empty_state(1))


def decode_step_ms(model: DecoderModel, context: int, repeats: int = 5) -> dict[str, float]:
    """Median ms of one decode step after `context` tokens, with and without the cache."""
    ids = _ids(model.metadata.vocab_size, context + 1, context)
    logits, state = _prefill(model, ids[:, :context])
    mask = np.ones((1, context + 1), np.int64)
    cached, recomputed = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        model.step(ids[:, context:], mask, positions(mask)[:, -1:], state)
        cached.append(time.perf_counter() - started)
        started = time.perf_counter()
        model.step(ids, mask, positions(mask), model.empty_state(1))
        recomputed.append(time.perf_counter() - started)
    return {"cache": 1e3 * statistics.median(cached),
            "no_cache": 1e3 * statistics.median(recomputed)}


def generation_speed(model: DecoderModel, new_tokens: int) -> dict[str, float]:
    """Time to first token and tokens/s of a greedy run (no stop) after a 32-token prompt."""
    ids = _ids(model.metadata.vocab_size, PROMPT, 7)
    started = time.perf_counter()
    logits, state = _prefill(model, ids)
    token = logits[:, -1].argmax(-1)[:, None].astype(np.int64)  # [1, 1]
    first = time.perf_counter() - started
    mask = np.ones((1, PROMPT), np.int64)
    for _ in range(new_tokens - 1):
        mask = np.concatenate([mask, np.ones((1, 1), np.int64)], axis=1)
        logits, state = model.step(token, mask, positions(mask)[:, -1:], state)
        token = logits[:, -1].argmax(-1)[:, None].astype(np.int64)
    total = time.perf_counter() - started
    return {"time_to_first_token_ms": 1e3 * first, "tokens_per_s": new_tokens / total}


@torch.no_grad()
def ganet_cache(model, standard, tokenizer, texts: list[str]) -> list[dict[str, float]]:
    """Cache bytes against gate density as the gate network's score bias moves."""
    rows = [tokenizer.encode(t, bos=True)[: model.config.max_seq] for t in texts[:32]]
    scores: list[torch.Tensor] = []
    hook = model.gate_network.register_forward_hook(
        lambda module, inputs, output: scores.append(output[0].flatten()))
    for row in rows:
        model(torch.tensor([row]))
    hook.remove()
    every = torch.cat(scores).numpy()
    # shifts that close the lowest 0 %, 25 %, ... of the gates (a threshold at each quantile)
    shifts = [float(-np.quantile(every, q)) if q else float(1.0 - every.min())
              for q in (0.0, 0.25, 0.5, 0.75, 0.9)]
    out = []
    base = model.gate_network.score.bias.clone()
    for shift in shifts:
        model.gate_network.score.bias.copy_(base + shift)
        opened = real = ganet_bytes = standard_bytes = 0
        for row in rows:
            ids = torch.tensor([row])
            _, present = model(ids)
            _, dense = standard(ids)
            opened += int(present["past_key_values.0.key_mask"].sum())
            real += len(row)
            ganet_bytes += sum(v.numel() * v.element_size() for v in present.values())
            standard_bytes += sum(v.numel() * v.element_size() for v in dense.values())
        out.append({"bias_shift": shift, "density": opened / real, "cache_bytes": ganet_bytes,
                    "standard_cache_bytes": standard_bytes,
                    "ratio": ganet_bytes / standard_bytes})
    model.gate_network.score.bias.copy_(base)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="standard,qvi,ganet,evolving")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--contexts", default="16,64,128,192")
    parser.add_argument("--data", type=Path)
    parser.add_argument("--ganet-density-target", type=float,
                        help="GA-Net trains toward this gate density (FitOptions.density_target)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    variants = args.variants.split(",")
    contexts = [int(c) for c in args.contexts.split(",")]
    texts = ([json.loads(line)["text"] for line in args.data.read_text().splitlines()
              if line.strip()] if args.data else synthetic_texts())
    config = {"d_model": 64, "n_heads": 4, "n_layers": 2, "d_ff": 128,
              "max_seq": max(max(contexts) + 1, PROMPT + args.new_tokens)}
    options = FitOptions(steps=args.steps, batch_size=16, seed=0)
    trained, models, quality = {}, {}, {}
    folder = Path(tempfile.mkdtemp(prefix="generation-bench-"))
    for variant in variants:
        started = time.perf_counter()
        own = (dataclasses.replace(options, density_target=args.ganet_density_target)
               if variant == "ganet" else options)
        result = fit_decoder(texts, {**config, "variant": variant}, own)
        trained[variant] = result
        export_decoder(result.model, result.tokenizer, folder / f"{variant}.onnx")
        models[variant] = DecoderModel(folder / f"{variant}.onnx", threads=args.threads)
        quality[variant] = {"perplexity": result.metrics["perplexity"],
                            "baseline_perplexity": result.metrics["baseline_perplexity"],
                            "train_and_export_s": time.perf_counter() - started,
                            **({"gate_density": result.metrics["gate_density"]}
                               if "gate_density" in result.metrics else {})}
        print(f"{variant}: trained and exported, perplexity "
              f"{result.metrics['perplexity']:.3f}", flush=True)
    samples: dict = {v: {"steps": {c: [] for c in contexts}, "speed": []} for v in variants}
    for round_index in range(args.rounds):
        order = variants[:]
        random.Random(round_index).shuffle(order)
        for variant in order:
            model = models[variant]
            for context in contexts:
                samples[variant]["steps"][context].append(decode_step_ms(model, context))
            samples[variant]["speed"].append(generation_speed(model, args.new_tokens))
    report: dict = {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                    "command": " ".join(sys.argv), "threads": args.threads,
                    "rounds": args.rounds, "load_average": os.getloadavg(), "model": config,
                    "train_steps": args.steps, "variants": {}}
    for variant in variants:
        runs = samples[variant]
        speed = {k: statistics.median(s[k] for s in runs["speed"]) for k in runs["speed"][0]}
        report["variants"][variant] = {
            **quality[variant], **speed,
            "decode_step_ms": {str(c): {k: statistics.median(s[k] for s in runs["steps"][c])
                                        for k in ("cache", "no_cache")} for c in contexts},
        }
    if "standard" in variants:
        base = report["variants"]["standard"]["tokens_per_s"]
        for entry in report["variants"].values():
            entry["tokens_per_s_vs_standard"] = entry["tokens_per_s"] / base
    if "ganet" in variants and "standard" in variants:
        _, held = split_texts(texts, options.eval_fraction, options.seed)
        ganet = trained["ganet"]
        report["ganet_cache"] = ganet_cache(ganet.model, trained["standard"].model,
                                            ganet.tokenizer, held)
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "generation.json", json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
