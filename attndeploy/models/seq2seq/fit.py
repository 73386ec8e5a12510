"""Train a `Seq2Seq` on sentence pairs and measure it beside the baselines (issue #51).

The held-out pairs are the fixed near-duplicate-aware split (`pairs.split_pairs`); the BPE is
learnt on the training pairs alone. Training: teacher forcing, label-smoothed cross-entropy
over the target tokens, AdamW with a linear warm-up and cosine decay, batches drawn at random
from length buckets (so a batch's pads are few), a step budget and an optional time budget.
Measured on the held-out pairs: corpus BLEU and chrF of greedy decoding (the torch-free loop
run by PyTorch), beside the copy-the-source and TF-IDF retrieval baselines' BLEU and chrF.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from attndeploy.errors import DataError
from attndeploy.generation.hf_tokenizer import HFTokenizer
from attndeploy.generation.seq2seq import greedy
from attndeploy.models.seq2seq.backend import TorchSeq2Seq
from attndeploy.models.seq2seq.checkpoint import save_seq2seq
from attndeploy.models.seq2seq.config import Seq2SeqConfig
from attndeploy.models.seq2seq.metrics import (
    RetrievalBaseline,
    copy_baseline,
    corpus_bleu,
    corpus_chrf,
)
from attndeploy.models.seq2seq.model import Seq2Seq, label_smoothed_loss
from attndeploy.models.seq2seq.pairs import Pair, split_pairs
from attndeploy.models.seq2seq.tokenizer import (
    PAD_ID,
    encode_source,
    encode_target,
    train_bpe,
)

IGNORE = -100


@dataclass(frozen=True)
class FitOptions:
    steps: int = 3000
    batch_size: int = 64
    learning_rate: float = 2e-3
    weight_decay: float = 0.01
    warmup_steps: int = 100
    seed: int = 0
    max_seconds: float | None = None
    eval_fraction: float = 0.05
    vocab_size: int = 8000
    label_smoothing: float = 0.1
    eval_batch: int = 64


VALIDATION_SOURCES = 8  # held-out sources a checkpoint keeps for `attndeploy validate`


@dataclass
class FitResult:
    model: Seq2Seq
    tokenizer: HFTokenizer
    metrics: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)


def _batch(rows: Sequence[tuple[list[int], list[int]]]) -> tuple[torch.Tensor, ...]:
    """(source ids [B, S], source mask, decoder inputs [B, T], decoder mask, labels [B, T])."""
    width_s = max(len(s) for s, _ in rows)
    width_t = max(len(t) for _, t in rows) - 1
    src = torch.full((len(rows), width_s), PAD_ID, dtype=torch.long)  # [B, S]
    src_mask = torch.zeros(len(rows), width_s, dtype=torch.long)
    dec = torch.full((len(rows), width_t), PAD_ID, dtype=torch.long)  # [B, T]
    dec_mask = torch.zeros(len(rows), width_t, dtype=torch.long)
    labels = torch.full((len(rows), width_t), IGNORE, dtype=torch.long)  # [B, T]
    for b, (s, t) in enumerate(rows):
        src[b, :len(s)] = torch.tensor(s)
        src_mask[b, :len(s)] = 1
        dec[b, :len(t) - 1] = torch.tensor(t[:-1])
        dec_mask[b, :len(t) - 1] = 1
        labels[b, :len(t) - 1] = torch.tensor(t[1:])
    return src, src_mask, dec, dec_mask, labels


def _buckets(rows: Sequence[tuple[list[int], list[int]]], batch_size: int, rng: random.Random
             ) -> list[list[int]]:
    """Batches of row indices of similar target length, in a random order."""
    order = sorted(range(len(rows)), key=lambda i: (len(rows[i][1]), rng.random()))
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    rng.shuffle(batches)
    return batches


def _learning_rate(step: int, options: FitOptions, elapsed: float) -> float:
    """Linear warm-up, then cosine decay to 0 by the end of the step budget or of the time
    budget (`max_seconds`), whichever comes first."""
    if step < options.warmup_steps:
        return options.learning_rate * (step + 1) / options.warmup_steps
    progress = (step - options.warmup_steps) / max(options.steps - options.warmup_steps, 1)
    if options.max_seconds:
        progress = max(progress, elapsed / options.max_seconds)
    return options.learning_rate * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))


def translate_greedy(model: Seq2Seq, tokenizer: HFTokenizer, sources: Sequence[str],
                     batch: int = 64) -> list[str]:
    """Greedy translations of `sources` (the torch-free loop run by PyTorch)."""
    backend = TorchSeq2Seq(model)
    encoded = [encode_source(tokenizer, s, model.config.max_source) for s in sources]
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    out: list[str] = [""] * len(sources)
    for start in range(0, len(order), batch):
        chunk = order[start:start + batch]
        for index, result in zip(chunk, greedy(backend, [encoded[i] for i in chunk]),
                                 strict=True):
            out[index] = tokenizer.decode(result.ids)
    return out


def teacher_forced_loss(model: Seq2Seq, rows: Sequence[tuple[list[int], list[int]]],
                        batch: int = 64) -> float:
    """The mean cross-entropy per target token (no label smoothing, eval mode) of `rows`
    (source ids, target ids), each target token predicted from the true ones before it."""
    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(rows), batch):
            src, src_mask, dec, dec_mask, labels = _batch(rows[start:start + batch])
            logits = model(src, src_mask, dec, dec_mask)  # [B, T, V]
            real = labels != IGNORE  # [B, T]
            total += float(torch.nn.functional.cross_entropy(
                logits[real], labels[real], reduction="sum"))
            count += int(real.sum())
    return round(total / max(count, 1), 4)


def score(hypotheses: Sequence[str], references: Sequence[str], prefix: str = ""
          ) -> dict[str, float]:
    return {f"{prefix}bleu": round(corpus_bleu(hypotheses, references), 2),
            f"{prefix}chrf": round(corpus_chrf(hypotheses, references), 2)}


def baselines(train: Sequence[Pair], held: Sequence[Pair]) -> dict[str, Any]:
    """The retrieval (`baseline_*`) and copy (`copy_*`) baselines on the held-out pairs."""
    sources, references = [s for s, _ in held], [t for _, t in held]
    retrieved = RetrievalBaseline(train).translate_all(sources)
    return {"baseline": "TF-IDF nearest-neighbour retrieval",
            **score(retrieved, references, "baseline_"),
            **score(copy_baseline(sources), references, "copy_")}


def fit_translation(pairs: Sequence[Pair], config: dict[str, Any], options: FitOptions, *,
                    progress: bool = False) -> FitResult:
    """Split, learn the BPE, train a `Seq2Seq(Seq2SeqConfig(**config, vocab_size=...))`,
    and measure it and the baselines on the held-out pairs."""
    if not 0.0 < options.eval_fraction < 1.0:
        raise DataError(f"the held-out fraction must be in (0, 1), got "
                        f"{options.eval_fraction}")
    train, held = split_pairs(pairs, options.eval_fraction)
    if not train or not held:
        raise DataError(f"{len(pairs)} pairs leave {len(train)} for training and {len(held)} "
                        f"held out: give more pairs or another --eval-fraction")
    started = time.monotonic()  # the time budget counts the BPE too
    tokenizer = train_bpe([text for pair in train for text in pair], options.vocab_size)
    model_config = Seq2SeqConfig(vocab_size=len(tokenizer), **config)
    torch.manual_seed(options.seed)
    model = Seq2Seq(model_config)
    rows = [(encode_source(tokenizer, s, model_config.max_source),
             encode_target(tokenizer, t, model_config.max_target)) for s, t in train]
    optimizer = torch.optim.AdamW(model.parameters(), lr=options.learning_rate,
                                  weight_decay=options.weight_decay, betas=(0.9, 0.98))
    rng = random.Random(options.seed)
    model.train()
    step, losses, batches = 0, [], []
    bar = Progress(TextColumn(f"[bold]train translation ({model_config.variant})"), BarColumn(),
                   TextColumn("{task.completed}/{task.total} steps"),
                   TextColumn("{task.fields[status]}"), TimeElapsedColumn(),
                   disable=not progress)
    with bar:
        task = bar.add_task("train", total=options.steps, status="")
        while step < options.steps:
            if options.max_seconds is not None and (
                    time.monotonic() - started > options.max_seconds):
                break
            if not batches:
                batches = _buckets(rows, options.batch_size, rng)
            src, src_mask, dec, dec_mask, labels = _batch([rows[i] for i in batches.pop()])
            for group in optimizer.param_groups:
                group["lr"] = _learning_rate(step, options, time.monotonic() - started)
            logits = model(src, src_mask, dec, dec_mask)  # [B, T, V]
            loss = label_smoothed_loss(logits, labels, options.label_smoothing, IGNORE)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            losses.append(loss.item())
            step += 1
            bar.update(task, advance=1, status=f"loss {losses[-1]:.3f}")
    train_seconds = time.monotonic() - started
    model.eval()
    held_rows = [(encode_source(tokenizer, s, model_config.max_source),
                  encode_target(tokenizer, t, model_config.max_target)) for s, t in held]
    # the same measure on as many training pairs: the gap between them is what training fit
    # and did not carry over to unseen pairs
    losses_at_end = {"held_out_loss": teacher_forced_loss(model, held_rows, options.eval_batch),
                     "train_pairs_loss": teacher_forced_loss(model, rows[:len(held_rows)],
                                                             options.eval_batch)}
    sources, references = [s for s, _ in held], [t for _, t in held]
    decoded = translate_greedy(model, tokenizer, sources, options.eval_batch)
    model_scores, others = score(decoded, references), baselines(train, held)
    metrics = {"bleu": model_scores["bleu"], "baseline_bleu": others["baseline_bleu"],
               "copy_bleu": others["copy_bleu"], "chrf": model_scores["chrf"],
               "baseline_chrf": others["baseline_chrf"], "copy_chrf": others["copy_chrf"],
               "baseline": others["baseline"], "decoding": "greedy",
               "held_out_pairs": len(held),
               "train_loss": round(sum(losses[-50:]) / max(len(losses[-50:]), 1), 4),
               **losses_at_end}
    summary = {"steps": step, "seconds": round(train_seconds, 1),
               "eval_seconds": round(time.monotonic() - started - train_seconds, 1),
               "variant": model_config.variant, "vocab_size": len(tokenizer),
               "parameters": sum(p.numel() for p in model.parameters()),
               "train_pairs": len(train)}
    data = {"held_out_sources": sources[:VALIDATION_SOURCES]}
    return FitResult(model, tokenizer, metrics, summary, data)


def train_translation(pairs: Sequence[Pair], config: dict[str, Any], options: FitOptions,
                      out: Path, *, force: bool = False, progress: bool = False) -> FitResult:
    """`fit_translation`, then the checkpoint at `out` (config.json + model.safetensors)."""
    result = fit_translation(pairs, config, options, progress=progress)
    save_seq2seq(result.model, result.tokenizer, out, metrics=result.metrics,
                 training=result.summary, data=result.data, force=force)
    return result
