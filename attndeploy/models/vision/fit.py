"""Train an image model on an image folder and measure it beside logistic regression on the
pixels (issue #53; docs/images.md).

The preprocessing (size, channels, per-channel mean and std) is measured on the training
images once and stored in the checkpoint. Training: cross-entropy (optionally label-smoothed),
plus GA-Net's density penalty (`ganet_penalty` times the mean relaxed gate), AdamW with a
linear warm-up and cosine decay over the planned steps, shuffled batches. With a time budget
(`max_seconds`) the plan is the steps that fit it, measured over the first steps, so the
learning rate still decays to zero. Measured on the held-out images: `accuracy`, the
baseline's `baseline_accuracy`, and GA-Net's `density` (the share of positions its hard gates
keep). The summary names the network first (`network`: `vit, ganet attention`, or `vit without
attention` for the other baseline, the same network with attention removed:
`attention=False`), so train's output reads it beside the two accuracies.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from torch import nn

from attndeploy.data.images import ImageSet, measure_preprocessing
from attndeploy.errors import CheckpointError, DataError
from attndeploy.families.image_classification.pixels import Preprocessing
from attndeploy.fsutil import check_replaceable
from attndeploy.models.vision.build import build_model
from attndeploy.models.vision.checkpoint import save_image_model
from attndeploy.models.vision.config import ImageModelConfig, with_architecture_defaults
from attndeploy.models.vision.logistic import fit_logistic, logistic_accuracy

PLAN_AFTER = 20  # steps timed before a time budget sets the plan


@dataclass(frozen=True)
class FitOptions:
    steps: int = 3000
    batch_size: int = 128
    learning_rate: float = 1e-3
    weight_decay: float = 0.05
    warmup_steps: int = 100
    seed: int = 0
    max_seconds: float | None = None
    label_smoothing: float = 0.0
    eval_batch: int = 500

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1 or self.eval_batch < 1:
            raise DataError("steps, batch_size and eval_batch must be positive")
        if self.max_seconds is not None and self.max_seconds <= 0:
            raise DataError(f"max_seconds must be positive, got {self.max_seconds}")


@dataclass
class FitResult:
    model: nn.Module
    preprocessing: Preprocessing
    metrics: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)


def tensors(images: ImageSet, preprocessing: Preprocessing) -> tuple[torch.Tensor, torch.Tensor]:
    """(x float32 [N, C, H, W] normalised, y long [N])."""
    return (torch.from_numpy(preprocessing.normalise(images.pixels)),
            torch.from_numpy(images.labels.astype(np.int64)))


def learning_rate_at(step: int, planned: int, options: FitOptions) -> float:
    """Linear warm-up over `warmup_steps`, then cosine decay to 0 at `planned`."""
    warmup = min(options.warmup_steps, max(planned - 1, 0))
    if step < warmup:
        return options.learning_rate * (step + 1) / warmup
    progress = (step - warmup) / max(planned - warmup, 1)
    return options.learning_rate * 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int
             ) -> dict[str, float]:
    """`accuracy` on (x, y), and GA-Net's `density` (mean share of open positions)."""
    model.eval()
    correct, open_share = 0, []
    for start in range(0, len(x), batch):
        out = model(x[start:start + batch])
        correct += int((out["logits"].argmax(-1) == y[start:start + batch]).sum())
        if "gates" in out:
            open_share.append(out["gates"].float().mean(-1))  # [b]
    metrics = {"accuracy": correct / max(len(x), 1)}
    if open_share:
        metrics["density"] = float(torch.cat(open_share).mean())
    return metrics


def _train(model: nn.Module, x: torch.Tensor, y: torch.Tensor, options: FitOptions,
           progress: bool) -> dict[str, Any]:
    """Train `model` in place; the summary of the run."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=options.learning_rate,
                                  weight_decay=options.weight_decay)
    penalty = getattr(model.config, "ganet_penalty", 0.0)
    generator = torch.Generator().manual_seed(options.seed)
    order = torch.randperm(len(x), generator=generator)
    planned, position, started = options.steps, 0, time.perf_counter()
    losses: list[float] = []
    bar = Progress(TextColumn("[bold]train"), BarColumn(), TextColumn("{task.completed}/"
                   "{task.total} steps {task.description}"), TimeElapsedColumn(),
                   disable=not progress, transient=True)
    with bar:
        task = bar.add_task("", total=planned)
        step = 0
        while step < planned:
            model.train()
            if position + options.batch_size > len(x):
                order, position = torch.randperm(len(x), generator=generator), 0
            index = order[position:position + options.batch_size]
            position += options.batch_size
            for group in optimizer.param_groups:
                group["lr"] = learning_rate_at(step, planned, options)
            out = model(x[index], details=True)
            loss = F.cross_entropy(out["logits"], y[index],
                                   label_smoothing=options.label_smoothing)
            if "density_penalty" in out:
                loss = loss + penalty * out["density_penalty"]
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
            step += 1
            if options.max_seconds is not None and step == PLAN_AFTER:
                per_step = (time.perf_counter() - started) / step
                planned = max(step, min(options.steps, int(options.max_seconds / per_step)))
                bar.update(task, total=planned)
            bar.update(task, completed=step, description=f"loss {np.mean(losses[-50:]):.3f}")
    return {"steps": step, "seconds": round(time.perf_counter() - started, 1),
            "final_loss": round(float(np.mean(losses[-50:])), 4),
            "epochs": round(step * options.batch_size / len(x), 2)}


def train_images(train: ImageSet, held_out: ImageSet, model_fields: dict[str, Any],
                 options: FitOptions, out: Path, *, force: bool = False,
                 progress: bool = False, source: str = "") -> FitResult:
    """Train the model `model_fields` describe (`ImageModelConfig` fields beyond the input's,
    which the images give) on `train`, measure it and the baseline on `held_out`, save the
    checkpoint at `out`."""
    check_replaceable(Path(out), force=force, error=CheckpointError)  # before the training
    if len(train) == 0 or len(held_out) == 0:
        raise DataError("training needs images in both the training and the held-out part")
    preprocessing = measure_preprocessing(train.pixels)
    config = ImageModelConfig(num_labels=len(train.class_names),
                              channels=preprocessing.channels, height=preprocessing.height,
                              width=preprocessing.width,
                              **with_architecture_defaults(model_fields))
    x, y = tensors(train, preprocessing)
    x_held, y_held = tensors(held_out, preprocessing)
    torch.manual_seed(options.seed)
    model = build_model(config)
    summary = _train(model, x, y, options, progress)
    metrics = evaluate(model, x_held, y_held, options.eval_batch)
    baseline = fit_logistic(x, y, config.num_labels)
    metrics["baseline_accuracy"] = logistic_accuracy(baseline, x_held, y_held)
    metrics = {name: round(value, 4) for name, value in metrics.items()}
    summary = {"network": config.network, **summary,
               "parameters": sum(p.numel() for p in model.parameters())}
    data = {"source": source, "train_images": len(train), "held_out_images": len(held_out),
            "classes": list(train.class_names)}
    training = {**asdict(options), **summary}
    save_image_model(model, train.class_names, preprocessing, Path(out), metrics=metrics,
                     training=training, data=data, force=force)
    return FitResult(model, preprocessing, metrics, summary, data)
