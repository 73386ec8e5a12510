"""Train a `CausalLM` on texts: next-token cross-entropy, perplexity on held-out text beside an
interpolated Kneser-Ney trigram (`ngram.py`) on the same tokens (issue #49).

Every text becomes `<bos> words <eos>` (`LMTokenizer`), cut into windows of at most `max_seq`
tokens; a batch is right-padded and its pads are left out of the loss (a causal model's real
tokens never read the pads after them). The held-out split is a seeded share of the texts; the
tokenizer is built from the training split only. AdamW with a linear warm-up and cosine decay;
GA-Net's gate network trains with its logistic noise (relaxed gates) and decodes with hard ones;
with a `density_target` a hinge on the soft open share pushes gates closed, so fewer tokens enter
the cache (`gate_density` measures the hard gates on the held-out text).

Fine-tuning a pretrained decoder (`Start`: a converted model with its own tokenizer, every variant
at its warm start) keeps the model and its tokenizer, trains on windows of `window` tokens (128
unless asked: a pretrained context of thousands would not fit 2 cores), the pretrained weights at
`learning_rate` and the parameters the variant added (QVI's maps, Evolving Attention's convs,
GA-Net's gate network) at `new_learning_rate`, as the encoders' fine-tuning does. The variant
comes in gradually (`attndeploy.models.decoder.warm_start`): Evolving Attention's α and β from
0 to `evolving_mix_cap` of their values over `ramp_steps` (the warm-up unless asked), and a
GA-Net `density_target` from 1 down to its value over the same steps. The held-out perplexity
before fine-tuning is reported beside the one after (`perplexity_before`).
"""

from __future__ import annotations

import dataclasses
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

from attndeploy.errors import ConfigError, DataError
from attndeploy.generation.tokenizer import LMTokenizer
from attndeploy.models.decoder.checkpoint import save_decoder
from attndeploy.models.decoder.config import DecoderConfig
from attndeploy.models.decoder.model import CausalLM
from attndeploy.models.decoder.ngram import KneserNeyTrigram
from attndeploy.models.decoder.warm_start import density_target_at, evolving_mix_at

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
    window: int | None = None  # training window in tokens [default: max_seq; 128 fine-tuning]
    new_learning_rate: float | None = None  # fine-tuning: the variant's added parameters
    # Fine-tuning's bring-in (`warm_start`): Evolving Attention's share of α and β rises from 0
    # to `evolving_mix_cap` over `ramp_steps` steps [default: warmup_steps]; a `density_target`
    # falls from 1 (every gate open, the warm start) to its value over the same steps.
    evolving_mix_cap: float = 1.0
    ramp_steps: int | None = None
    # fine-tuning: measure the start's held-out perplexity (`perplexity_before`); a benchmark
    # fine-tuning several warm starts of one model, which all compute the same, may measure once
    measure_before: bool = True

    def __post_init__(self) -> None:
        if not 0.0 <= self.evolving_mix_cap <= 1.0:
            raise ConfigError(f"evolving_mix_cap must be in [0, 1], got {self.evolving_mix_cap}")
        if self.ramp_steps is not None and self.ramp_steps < 0:
            raise ConfigError(f"ramp_steps must be >= 0, got {self.ramp_steps}")

    @property
    def bring_in_steps(self) -> int:
        return self.warmup_steps if self.ramp_steps is None else self.ramp_steps


@dataclass
class Start:
    """A pretrained decoder to fine-tune (`attndeploy.integrations.hf_decoder`): the converted
    model, its tokenizer (an `HFTokenizer`) and where it came from."""

    model: CausalLM
    tokenizer: Any
    source: str


@dataclass
class FitResult:
    """What `train` reports: `metrics` (perplexity, baseline_perplexity, ...) and `summary`."""

    model: CausalLM
    tokenizer: Any  # LMTokenizer, or a fine-tuned model's own
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


def added_parameters(model: CausalLM) -> set[str]:
    """The parameters a conversion added to a pretrained decoder (the variant's own)."""
    return {name for name, _ in model.named_parameters()
            if name.startswith("gate_network.") or (
                ".attention." in name and name.rsplit(".", 2)[-2] not in ("qkv", "out"))}


def _optimizer(model: CausalLM, options: FitOptions, start: Start | None
               ) -> torch.optim.Optimizer:
    """AdamW; fine-tuning: the added parameters in their own group at `new_learning_rate`
    (each group's `scale` multiplies the schedule's rate)."""
    if start is None or options.new_learning_rate is None:
        groups = [{"params": list(model.parameters()), "scale": 1.0}]
    else:
        added = added_parameters(model)
        params = dict(model.named_parameters())
        groups = [{"params": [p for n, p in params.items() if n not in added], "scale": 1.0},
                  {"params": [p for n, p in params.items() if n in added],
                   "scale": options.new_learning_rate / options.learning_rate}]
    return torch.optim.AdamW(groups, lr=options.learning_rate,
                             weight_decay=options.weight_decay)


def fit_decoder(texts: Sequence[str], config: dict[str, Any], options: FitOptions, *,
                progress: bool = False, start: Start | None = None) -> FitResult:
    """Build the tokenizer on the training texts, train a `CausalLM(DecoderConfig(**config,
    vocab_size=...))`, and measure it and the trigram baseline on the held-out texts; with
    `start`, fine-tune that model with its own tokenizer instead (`config` is not read)."""
    train_texts, held_texts = split_texts(texts, options.eval_fraction, options.seed)
    torch.manual_seed(options.seed)
    if start is None:
        tokenizer = LMTokenizer.build(train_texts, max_vocab=options.max_vocab)
        decoder_config = DecoderConfig(vocab_size=len(tokenizer), **config)
        model = CausalLM(decoder_config)
        window = options.window or decoder_config.max_seq
    else:
        tokenizer, model = start.tokenizer, start.model
        decoder_config = model.config
        window = min(options.window or 128, decoder_config.max_seq)
    train_rows = windows(tokenizer, train_texts, window)
    held_rows = windows(tokenizer, held_texts, window)
    if not train_rows or not held_rows:
        raise DataError("every text is shorter than two tokens: nothing to train or measure")
    eval_batch = max(1, min(32, options.batch_size))
    before = (perplexity(model, held_rows, eval_batch)
              if start is not None and options.measure_before else None)
    ramp = (start is not None and decoder_config.variant == "evolving"
            and decoder_config.evolving_mix < 1.0)
    optimizer = _optimizer(model, options, start)
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
                group["lr"] = _learning_rate(step, options) * group["scale"]
            if ramp:
                _set_evolving_mix(model, evolving_mix_at(step, options.bring_in_steps,
                                                         options.evolving_mix_cap))
            target = options.density_target
            if start is not None and target is not None:
                target = density_target_at(step, options.bring_in_steps, target)
            loss, _ = lm_loss(model, rows, target, options.density_weight)
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
        "perplexity": perplexity(model, held_rows, eval_batch),
        **({"perplexity_before": before} if before is not None else {}),
        "baseline": "interpolated Kneser-Ney trigram",
        "baseline_perplexity": baseline.perplexity(held_rows),
        "train_loss": sum(losses[-10:]) / max(len(losses[-10:]), 1),
        "held_out_texts": len(held_texts),
        "held_out_tokens": sum(len(r) - 1 for r in held_rows),
    }
    if model.gate_network is not None:
        metrics["gate_density"] = gate_density(model, held_rows)
    summary = {"steps": step, "seconds": round(time.monotonic() - started, 2),
               "variant": model.config.variant, "vocab_size": len(tokenizer),
               "parameters": sum(p.numel() for p in model.parameters()),
               "train_texts": len(train_texts), "window": window,
               **({"fine_tuned_from": start.source} if start is not None else {})}
    return FitResult(model, tokenizer, metrics, summary)


def _set_evolving_mix(model: CausalLM, mix: float) -> None:
    """Evolving Attention's α and β `mix` of the way in; the config records it."""
    for block in model.blocks:
        block.attention.set_warm_start_progress(mix)
    model.config = dataclasses.replace(model.config, evolving_mix=mix)


def train_decoder(texts: Sequence[str], config: dict[str, Any], options: FitOptions, out: Path,
                  *, force: bool = False, progress: bool = False,
                  start: Start | None = None) -> FitResult:
    """`fit_decoder`, then the checkpoint at `out` (config.json + model.safetensors)."""
    result = fit_decoder(texts, config, options, progress=progress, start=start)
    save_decoder(result.model, result.tokenizer, out, metrics=result.metrics,
                 training=result.summary, force=force)
    return result
