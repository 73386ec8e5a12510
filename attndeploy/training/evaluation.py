"""Held-out evaluation and the training loss: what `attndeploy.train` measures a model by.

Evaluation runs in eval mode (hard gates for GA-Net) and reports the family's metrics (its training
part's `metrics`: accuracy for the built-in families) and loss, and for GA-Net
the gate density and the count and rate of all-closed rescues (docs/variants.md §3.7).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import torch

from attndeploy.data.dataset import IGNORE_INDEX  # noqa: F401  (re-exported: a public name)
from attndeploy.families.registry import family_specs
from attndeploy.models.families import training_part

if TYPE_CHECKING:
    from attndeploy.models import AttnModel


def task_loss(logits: torch.Tensor, labels: torch.Tensor, label_smoothing: float = 0.0,
              *, head: str | None = None, module: torch.nn.Module | None = None
              ) -> torch.Tensor:
    """The loss of `head`'s family (its training part's `loss`, or its `head_loss` given the
    model's head `module`: a CRF's loss needs its transitions). Without `head` (the callers
    before families), the family is the first whose logits output (its spec's `outputs`) has
    the rank of `logits`: [B, C] text classification's, [B, T, C] token classification's."""
    if head is None:
        head = next(spec.head for spec in family_specs()
                    if len(spec.outputs(logits.shape[-1])[0].dims) == logits.dim())
    part = training_part(head)
    if module is not None and hasattr(part, "head_loss"):
        return part.head_loss(module, logits, labels, label_smoothing)
    return part.loss(logits, labels, label_smoothing)


@torch.no_grad()
def evaluate(model: AttnModel, dataset: Any, *, batch_size: int = 256) -> dict[str, Any]:
    """Held-out metrics in eval mode; restores the model's previous mode. The family's metrics
    (its training part's `metrics`: accuracy for the built-in ones) come first, then `loss` (its
    `loss`, averaged over examples) and `examples`."""
    was_training = model.training
    model.eval()
    family = training_part(dataset.head)  # the labels' family
    module = getattr(model, "head", None)  # what a head-aware family's hooks read
    sums: Counter[str] = Counter()
    loss_sum = 0.0
    open_fraction_sum = 0.0
    rescues = examples = 0
    for input_ids, attention_mask, labels in dataset.batches(batch_size, shuffle=False):
        out = model(input_ids, attention_mask, details=True)
        logits = out["logits"]
        loss_sum += float(task_loss(logits, labels, head=dataset.head,
                                    module=module)) * labels.shape[0]
        if hasattr(family, "head_metric_sums"):
            sums.update(family.head_metric_sums(module, logits, labels, dataset.label_names))
        else:
            sums.update(family.metric_sums(logits, labels))
        examples += labels.shape[0]
        if "gates" in out:
            mask = attention_mask != 0
            gates = out["gates"] & mask
            open_fraction_sum += float((gates.sum(-1) / mask.sum(-1)).sum())
            naturally_open = (out["gate_logits"] > 0) & mask
            rescues += int((~naturally_open.any(-1)).sum())
    model.train(was_training)
    metrics: dict[str, Any] = {
        **family.metrics(dict(sums)),
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
