"""Train a `CausalLM` on texts: next-token cross-entropy, perplexity on held-out text beside an
interpolated Kneser-Ney trigram (`ngram.py`) on the same tokens (issue #49).

Every text becomes `<bos> words <eos>` (`LMTokenizer`), cut into windows of at most `max_seq`
tokens; a batch is right-padded and its pads are left out of the loss (a causal model's real
tokens never read the pads after them). The held-out split is a seeded share of the texts; the
tokenizer is built from the training split only. AdamW with a linear warm-up and cosine decay;
GA-Net's gate network trains with its logistic noise (relaxed gates) and decodes with hard ones;
with a `density_target` a hinge on the soft open share pushes gates closed, so fewer tokens enter
the cache (`gate_density` measures the hard gates on the held-out text).
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
import torch.nn.functional as F
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from attndeploy.errors import DataError
from attndeploy.generation.tokenizer import LMTokenizer
from attndeploy.models.decoder.checkpoint import save_decoder
from attndeploy.models.decoder.config import DecoderConfig
from attndeploy.models.decoder.model import CausalLM
from attndeploy.models.decoder.ngram import KneserNeyTrigram

IGNORE = -100


@dataclass(frozen=True)
class FitOptions:
    steps: int = 300
    batch_size: int = 16
    learning_rate: float = 3e-3
    weight_decay: float = 0.01
    warmup_steps: int = 30
    seed: int = 0
    max_seconds: float | None = None
    eval_fraction: float = 0.2
    max_vocab: int = 8000
    density_target: float | None = None  # GA-Net: push the mean open-gate chance down to this
    density_weight: float = 1.0  # ... with this weight on the excess (a hinge)


@dataclass
class FitResult:
    """What `train` reports: `metrics` (perplexity, baseline_perplexity, ...) and `summary`."""

    model: CausalLM
    tokenizer: LMTokenizer
    metrics: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)


def split_texts(texts: Sequence[str], fraction: float, seed: int) -> tuple[list[str], list[str]]:
    """(training, held-out) texts: a seeded shuffle, at least one of each."""
    if len(texts) < 2:
        raise DataError(f"a language model needs at least 2 texts (one held out), got "
                        f"{len(texts)}")
    if not 0.0 < fraction < 1.0:
        raise DataError(f"the held-out fraction must be in (0, 1), got {fraction}")
    order = list(range(len(texts)))
    random.Random(seed).shuffle(order)
    held = min(max(1, round(len(texts) * fraction)), len(texts) - 1)
    return [texts[i] for i in order[held:]], [texts[i] for i in order[:held]]


def windows(tokenizer: LMTokenizer, texts: Sequence[str], max_seq: int) -> list[list[int]]:
    """Every text as `<bos> ... <eos>` ids, cut into windows of at most `max_seq` (+1 for the
    shifted target) that overlap by one token, so every token is predicted once."""
    out = []
    for text in texts:
        ids = tokenizer.encode(text, bos=True, eos=True)
        for start in range(0, max(len(ids) - 1, 1), max_seq):
            piece = ids[start:start + max_seq + 1]
            if len(piece) >= 2:
                out.append(piece)
    return out


def _batch(rows: Sequence[list[int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids [B, T], attention_mask [B, T], targets [B, T]) right-padded; pads' targets
    are IGNORE."""
    width = max(len(r) for r in rows) - 1
    ids = torch.zeros(len(rows), width, dtype=torch.long)  # [B, T]
    targets = torch.full((len(rows), width), IGNORE, dtype=torch.long)  # [B, T]
    mask = torch.zeros(len(rows), width, dtype=torch.long)  # [B, T]
    for b, row in enumerate(rows):
        n = len(row) - 1
        ids[b, :n] = torch.tensor(row[:-1])
        targets[b, :n] = torch.tensor(row[1:])
        mask[b, :n] = 1
    return ids, mask, targets


def lm_loss(model: CausalLM, rows: Sequence[list[int]],
            density_target: float | None = None, density_weight: float = 1.0,
            ) -> tuple[torch.Tensor, int]:
    """(mean next-token cross-entropy, number of predicted tokens) of one batch; with a
    `density_target` and a GA-Net model, plus `density_weight` times the excess of its mean
    open-gate chance (sigmoid of the gate logits over real tokens) over the target."""
    ids, mask, targets = _batch(rows)
    gate_logits: list[torch.Tensor] = []
    hook = (model.gate_network.register_forward_hook(
        lambda module, inputs, output: gate_logits.append(output[0]))
        if density_target is not None and model.gate_network is not None else None)
    try:
        logits, _ = model(ids, mask)  # [B, T, V]
    finally:
        if hook is not None:
            hook.remove()
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]),  # [B*T, V]
                           targets.reshape(-1), ignore_index=IGNORE)  # [B*T]
    if gate_logits:
        real = mask.bool()  # [B, T]
        density = torch.sigmoid(gate_logits[0])[real].mean()  # the soft open share
        loss = loss + density_weight * torch.relu(density - density_target)
    return loss, int((targets != IGNORE).sum())


@torch.no_grad()
def perplexity(model: CausalLM, rows: Sequence[list[int]], batch_size: int = 32) -> float:
    """exp(mean cross-entropy) over every predicted token of `rows`, in eval mode."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for start in range(0, len(rows), batch_size):
        loss, n = lm_loss(model, rows[start:start + batch_size])
        total += float(loss) * n
        count += n
    model.train(was_training)
    return math.exp(total / count) if count else float("nan")


@torch.no_grad()
def gate_density(model: CausalLM, rows: Sequence[list[int]]) -> float:
    """GA-Net: the share of real tokens whose hard gate is open (they enter the cache)."""
    opened = real = 0
    for row in rows:
        _, present = model(torch.tensor([row[:-1]]))  # [1, n]: one text, no padding
        opened += int(present["past_key_values.0.key_mask"].sum())
        real += len(row) - 1
    return opened / real if real else float("nan")


def _learning_rate(step: int, options: FitOptions) -> float:
    if step < options.warmup_steps:
        return options.learning_rate * (step + 1) / options.warmup_steps
    span = max(options.steps - options.warmup_steps, 1)
    return options.learning_rate * 0.5 * (1 + math.cos(math.pi * (step - options.warmup_steps)
                                                       / span))


def fit_decoder(texts: Sequence[str], config: dict[str, Any], options: FitOptions, *,
                progress: bool = False) -> FitResult:
    """Build the tokenizer on the training texts, train a `CausalLM(DecoderConfig(**config,
    vocab_size=...))`, and measure it and the trigram baseline on the held-out texts."""
    train_texts, held_texts = split_texts(texts, options.eval_fraction, options.seed)
    tokenizer = LMTokenizer.build(train_texts, max_vocab=options.max_vocab)
    decoder_config = DecoderConfig(vocab_size=len(tokenizer), **config)
    torch.manual_seed(options.seed)
    model = CausalLM(decoder_config)
    train_rows = windows(tokenizer, train_texts, decoder_config.max_seq)
    held_rows = windows(tokenizer, held_texts, decoder_config.max_seq)
    optimizer = torch.optim.AdamW(model.parameters(), lr=options.learning_rate,
                                  weight_decay=options.weight_decay)
    rng = random.Random(options.seed)
    model.train()
    started, step, losses = time.monotonic(), 0, []
    bar = Progress(TextColumn("[bold]train causal LM"), BarColumn(),
                   TextColumn("{task.completed}/{task.total} steps"),
                   TextColumn("{task.fields[status]}"), TimeElapsedColumn(),
                   disable=not progress)
    with bar:
        task = bar.add_task("train", total=options.steps, status="")
        while step < options.steps:
            if options.max_seconds is not None and time.monotonic() - started > options.max_seconds:
                break
            rows = rng.sample(train_rows, min(options.batch_size, len(train_rows)))
            for group in optimizer.param_groups:
                group["lr"] = _learning_rate(step, options)
            loss, _ = lm_loss(model, rows, options.density_target, options.density_weight)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            losses.append(loss.item())
            step += 1
            bar.update(task, advance=1, status=f"loss {losses[-1]:.3f}")
    model.eval()
    baseline = KneserNeyTrigram(len(tokenizer)).fit(train_rows)
    metrics = {
        "perplexity": perplexity(model, held_rows),
        "baseline": "interpolated Kneser-Ney trigram",
        "baseline_perplexity": baseline.perplexity(held_rows),
        "train_loss": sum(losses[-10:]) / max(len(losses[-10:]), 1),
        "held_out_texts": len(held_texts),
        "held_out_tokens": sum(len(r) - 1 for r in held_rows),
    }
    if model.gate_network is not None:
        metrics["gate_density"] = gate_density(model, held_rows)
    summary = {"steps": step, "seconds": round(time.monotonic() - started, 2),
               "variant": decoder_config.variant, "vocab_size": len(tokenizer),
               "parameters": sum(p.numel() for p in model.parameters()),
               "train_texts": len(train_texts)}
    return FitResult(model, tokenizer, metrics, summary)


def train_decoder(texts: Sequence[str], config: dict[str, Any], options: FitOptions, out: Path,
                  *, force: bool = False, progress: bool = False) -> FitResult:
    """`fit_decoder`, then the checkpoint at `out` (config.json + model.safetensors)."""
    result = fit_decoder(texts, config, options, progress=progress)
    save_decoder(result.model, result.tokenizer, out, metrics=result.metrics,
                 training=result.summary, force=force)
    return result
