"""image-classification's training part (models layer): an image model trained on an image
folder (`attndeploy.data.images`: one subfolder per class, or `train/` and `test/` of them).

Like translation's, it trains the whole model itself: `train_folder` is the hook `attndeploy
train --data DIR` hands the folder to, and trains a ViT or an AA-CNN
(`attndeploy.models.vision.fit`). The protocol's head and label functions (a text encoder's
label head) refuse with one line; the metrics are `accuracy` (greater is better) beside
logistic regression on the pixels (`baseline_accuracy`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from attndeploy.data.images import load_training_images
from attndeploy.errors import CheckpointError, ConfigError, DataError
from attndeploy.fsutil import check_replaceable
from attndeploy.models.vision.fit import FitOptions, FitResult, train_images

JSONL_KEYS: tuple[str, ...] = ()  # reads an image folder, not JSONL lines
PRIMARY_METRIC = "accuracy"
GREATER_IS_BETTER = True
LABEL_DTYPE = torch.long
# `train` options read (the names `model` carries): --d-model, --heads, --layers, --d-ff,
# --dropout; and the image model's own: architecture (vit, aacnn), attention (False: the
# network without attention), patch_size, conv_channels, ganet_budget (GA-Net's share of
# positions kept per image; None: content gates).
SIZES = {"d_model": "d_model", "n_heads": "n_heads", "n_layers": "n_layers", "d_ff": "d_ff",
         "dropout": "dropout", "architecture": "architecture", "attention": "attention",
         "patch_size": "patch_size", "conv_channels": "conv_channels",
         "ganet_budget": "ganet_budget"}
FIT_FIELDS = ("steps", "batch_size", "learning_rate", "weight_decay", "warmup_steps", "seed",
              "max_seconds", "label_smoothing")


def train_folder(folder: Path, *, model: dict[str, Any], training: dict[str, Any],
                 eval_fraction: float, out: Path, force: bool = False,
                 progress: bool = False) -> FitResult:
    """Train an image model on `folder` and save it at `out`: `model` holds the variant and
    the sizes given (`SIZES`), `training` the recipe's fields (`FIT_FIELDS` are read);
    `eval_fraction` of each class is held out unless the folder has its own `test/`.
    `model["attention"] = False` trains the no-attention baseline (the same network with
    attention removed; its variant must be `standard`, the default); its summary's `network`
    says so beside the accuracy and logistic regression's."""
    fields = {ours: model[theirs] for theirs, ours in SIZES.items()
              if model.get(theirs) is not None}
    if model.get("variant") is not None:
        fields["variant"] = model["variant"]
    options = FitOptions(**{k: v for k, v in training.items()
                            if k in FIT_FIELDS and v is not None})
    check_replaceable(Path(out), force=force, error=CheckpointError)  # before reading images
    train, held_out = load_training_images(Path(folder), eval_fraction=eval_fraction,
                                           seed=options.seed)
    return train_images(train, held_out, fields, options, Path(out), force=force,
                        progress=progress, source=str(folder))


def _no_head(*_: Any, **__: Any) -> Any:
    raise ConfigError("an image model has its own classifier, not a text encoder's label "
                      "head: train it with `attndeploy train --data DIR` on an image folder")


build_head = apply_head = check_labels = labels_tensor = batch_labels = join_labels = _no_head


def loss(logits: torch.Tensor, labels: torch.Tensor, label_smoothing: float = 0.0
         ) -> torch.Tensor:
    """Cross-entropy of logits [B, C] against labels [B]."""
    return torch.nn.functional.cross_entropy(logits, labels, label_smoothing=label_smoothing)


def check_label_names(label_names: Sequence[str]) -> None:
    if len(label_names) < 2:
        raise DataError(f"an image classifier needs at least 2 classes, got {len(label_names)}")


def metric_sums(logits: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    """One batch's `correct` and `count`."""
    return {"correct": float((logits.argmax(-1) == labels).sum()), "count": float(len(labels))}


def metrics(sums: dict[str, float]) -> dict[str, float]:
    return {"accuracy": sums["correct"] / sums["count"] if sums.get("count") else 0.0}


def fit_baseline(*_: Any, **__: Any) -> dict:
    """Logistic regression on the pixels is measured by `train_folder` (it needs the images)."""
    return {}
