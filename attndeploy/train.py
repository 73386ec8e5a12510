"""Training loop and held-out evaluation for every model family and variant.

Loss: cross-entropy (+ density_weight · R for GA-Net, R = mean soft gate over valid tokens).
Evaluation runs in eval mode (hard gates for GA-Net) and reports accuracy, and for GA-Net the gate
density and the count and rate of all-closed rescues (variants.md §3.7).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from attndeploy.config import ModelConfig
from attndeploy.errors import ConfigError
from attndeploy.models import AttnModel, build_model, count_parameters

IGNORE_INDEX = -100


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 300
    batch_size: int = 32
    learning_rate: float = 3e-3
    weight_decay: float = 0.01
    warmup_steps: int = 30
    seed: int = 0
    max_seconds: float | None = None  # stop early once this much wall time has passed

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ConfigError(f"steps must be >= 1, got {self.steps}")
        if self.batch_size < 1:
            raise ConfigError(f"batch size must be >= 1, got {self.batch_size}")
        if not self.learning_rate > 0:
            raise ConfigError(f"learning rate must be > 0, got {self.learning_rate}")
        if self.max_seconds is not None and not self.max_seconds > 0:
            raise ConfigError(f"max_seconds must be > 0, got {self.max_seconds}")


@dataclass
class TrainResult:
    model: AttnModel
    metrics: dict[str, Any]
    summary: dict[str, Any]
    history: list[dict[str, float]] = field(default_factory=list)
    evaluations: list[dict[str, Any]] = field(default_factory=list)  # with eval_every


def task_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    if logits.dim() == 3:  # tagging: [B, T, C] against [B, T] with IGNORE_INDEX at pads
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX)
    return F.cross_entropy(logits, labels)


def _learning_rate_factor(step: int, config: TrainConfig) -> float:
    if step < config.warmup_steps:
        return (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps)
    return 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


@torch.no_grad()
def evaluate(model: AttnModel, dataset: Any, *, batch_size: int = 256) -> dict[str, Any]:
    """Held-out metrics in eval mode; restores the model's previous mode."""
    was_training = model.training
    model.eval()
    correct = total = 0
    loss_sum = 0.0
    open_fraction_sum = 0.0
    rescues = examples = 0
    for input_ids, attention_mask, labels in dataset.batches(batch_size, shuffle=False):
        out = model(input_ids, attention_mask, details=True)
        logits = out["logits"]
        loss_sum += float(task_loss(logits, labels)) * labels.shape[0]
        predictions = logits.argmax(-1)
        valid = labels != IGNORE_INDEX
        correct += int((predictions == labels)[valid].sum())
        total += int(valid.sum())
        examples += labels.shape[0]
        if "gates" in out:
            mask = attention_mask != 0
            gates = out["gates"] & mask
            open_fraction_sum += float((gates.sum(-1) / mask.sum(-1)).sum())
            naturally_open = (out["gate_logits"] > 0) & mask
            rescues += int((~naturally_open.any(-1)).sum())
    model.train(was_training)
    metrics: dict[str, Any] = {
        "accuracy": correct / max(1, total),
        "loss": loss_sum / max(1, examples),
        "examples": examples,
    }
    if model.is_gated:
        metrics.update(
            density=open_fraction_sum / max(1, examples),
            rescues=rescues,
            rescue_rate=rescues / max(1, examples),
        )
    return metrics


def train(
    model_config: ModelConfig,
    train_set: Any,
    eval_set: Any,
    config: TrainConfig,
    *,
    progress: bool = True,
    eval_every: int = 0,
) -> TrainResult:
    """Train a fresh model; returns it in eval mode with held-out metrics.

    With `eval_every` > 0 the held-out set is also evaluated every that many steps; each entry
    of `evaluations` records the step, the training time so far (evaluation time excluded) and
    the metrics.
    """
    torch.manual_seed(config.seed)
    model = build_model(model_config)
    model.train()
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay
    )
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: _learning_rate_factor(step, config)
    )
    density_weight = model_config.ganet.density_weight if model.is_gated else 0.0
    generator = torch.Generator().manual_seed(config.seed)
    history: list[dict[str, float]] = []
    evaluations: list[dict[str, Any]] = []
    started = time.perf_counter()
    paused = 0.0  # seconds spent in periodic evaluation, excluded from the training time
    step = 0
    bar = Progress(
        TextColumn(f"[bold]train {model_config.variant}"), BarColumn(),
        TextColumn("{task.completed}/{task.total} steps"), TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(), disable=not progress, transient=False,
    )
    with bar:
        task = bar.add_task("train", total=config.steps, status="")
        while step < config.steps:
            for input_ids, attention_mask, labels in train_set.batches(
                config.batch_size, shuffle=True, generator=generator
            ):
                out = model(input_ids, attention_mask, details=True)
                loss = task_loss(out["logits"], labels)
                total = loss
                if "density_penalty" in out:
                    total = loss + density_weight * out["density_penalty"]
                optimizer.zero_grad(set_to_none=True)
                total.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                schedule.step()
                step += 1
                record = {"step": step, "loss": loss.item()}
                if "density_penalty" in out:
                    record["soft_density"] = out["density_penalty"].item()
                history.append(record)
                bar.update(task, advance=1, status=f"loss {record['loss']:.3f}")
                if eval_every and step % eval_every == 0:
                    pause_start = time.perf_counter()
                    train_seconds = pause_start - started - paused
                    evaluations.append(
                        {"step": step, "train_seconds": round(train_seconds, 3),
                         **evaluate(model, eval_set)}
                    )
                    paused += time.perf_counter() - pause_start
                elapsed = time.perf_counter() - started - paused
                if step >= config.steps or (config.max_seconds and elapsed >= config.max_seconds):
                    break
            if config.max_seconds and time.perf_counter() - started - paused >= config.max_seconds:
                break
    seconds = time.perf_counter() - started - paused
    model.eval()
    metrics = evaluate(model, eval_set)
    summary = {
        "config": asdict(config),
        "steps_done": step,
        "seconds": round(seconds, 3),
        "parameters": count_parameters(model),
        "final_loss": history[-1]["loss"] if history else None,
    }
    if history and "soft_density" in history[-1]:
        summary["final_soft_density"] = history[-1]["soft_density"]
    return TrainResult(model, metrics, summary, history, evaluations)


# ----------------------------------------------------------------------------- data + checkpoint


@dataclass
class TrainingData:
    train_set: Any
    eval_set: Any
    tokenizer: Any
    label_names: tuple[str, ...]
    head: str
    source: dict[str, Any]


def load_training_data(
    *,
    task: str | None,
    data_file: Any = None,
    seed: int = 0,
    n_train: int = 4000,
    n_eval: int = 1000,
    eval_fraction: float = 0.2,
    max_seq: int = 128,
) -> TrainingData:
    """A built-in task (train and held-out sets from different seeds) or a JSONL file (split)."""
    from pathlib import Path

    from attndeploy.data import get_task, load_jsonl

    if data_file is not None:
        dataset, tokenizer = load_jsonl(Path(data_file), max_seq=max_seq)
        train_set, eval_set = dataset.split(eval_fraction, seed=seed)
        source = {"data_file": str(data_file), "eval_fraction": eval_fraction, "seed": seed}
        return TrainingData(train_set, eval_set, tokenizer, dataset.label_names, dataset.head,
                            source)
    spec = get_task(task or "sparse_evidence")
    train_set, tokenizer = spec.generate(n_train, seed=seed, max_seq=max_seq)
    eval_set, _ = spec.generate(n_eval, seed=seed + 10_000, max_seq=max_seq)
    source = {"task": spec.name, "seed": seed, "n_train": n_train, "n_eval": n_eval}
    return TrainingData(train_set, eval_set, tokenizer, spec.label_names, spec.head, source)


def train_checkpoint(
    model_config: ModelConfig,
    data: TrainingData,
    config: TrainConfig,
    out_dir: Any,
    *,
    force: bool = False,
    progress: bool = True,
) -> TrainResult:
    """Train, evaluate on the held-out set and save the checkpoint atomically."""
    from pathlib import Path

    from attndeploy.checkpoint import save_checkpoint
    from attndeploy.errors import CheckpointError

    out_dir = Path(out_dir)
    if out_dir.exists() and not force:  # refuse before spending the training time
        raise CheckpointError(f"{out_dir} already exists; pass --force to replace it")
    result = train(model_config, data.train_set, data.eval_set, config, progress=progress)
    save_checkpoint(
        result.model, out_dir, label_names=data.label_names, tokenizer=data.tokenizer,
        data=data.source, training=result.summary, metrics=result.metrics, force=force,
    )
    return result
