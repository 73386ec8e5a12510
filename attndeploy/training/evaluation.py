"""Held-out evaluation and the training loss: what `attndeploy.train` measures a model by.

Evaluation runs in eval mode (hard gates for GA-Net) and reports accuracy and loss, and for GA-Net
the gate density and the count and rate of all-closed rescues (docs/variants.md §3.7).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from attndeploy.models import AttnModel

IGNORE_INDEX = -100  # tagging labels at pads


def task_loss(logits: torch.Tensor, labels: torch.Tensor, label_smoothing: float = 0.0
              ) -> torch.Tensor:
    if logits.dim() == 3:  # tagging: [B, T, C] against [B, T] with IGNORE_INDEX at pads
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX,
                               label_smoothing=label_smoothing)
    return F.cross_entropy(logits, labels, label_smoothing=label_smoothing)


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


def batch_density(gates: torch.Tensor, attention_mask: torch.Tensor) -> float:
    """Hard-gate density of one batch, as `evaluate` computes it."""
    mask = attention_mask != 0
    return float(((gates & mask).sum(-1) / mask.sum(-1)).mean())
