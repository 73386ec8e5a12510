"""One optimizer step of the training loop (`attndeploy.train.fit`): the forward pass and its
loss, then the update.

The loss is the family's (its training part's `loss`: cross-entropy, optionally label-smoothed,
for the built-in families); with a dense-gate teacher, mixed
with the distillation loss on its soft targets at weight `config.distill`
(`attndeploy.training.distill`); for GA-Net, plus λ·R (R the model's `density_penalty`, the mean
soft gate over valid tokens).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from attndeploy.training import distill as distillation
from attndeploy.training.config import TrainConfig
from attndeploy.training.evaluation import task_loss


class StepLoss(NamedTuple):
    out: dict[str, torch.Tensor]  # the model's outputs (details=True): logits, gates, penalty
    task: torch.Tensor  # the task loss alone: what the history records
    total: torch.Tensor  # what the step minimises


def step_loss(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    labels: torch.Tensor,
    rows: torch.Tensor,
    config: TrainConfig,
    *,
    density_weight: float,
    soft_table: torch.Tensor | None = None,
    taught: torch.Tensor | None = None,
    head: str | None = None,
) -> StepLoss:
    """The forward pass of a training batch (`input_ids`, `attention_mask` [B, t], `labels` [B]
    or [B, t]; `rows` [B] its examples' indices in the training set) and its loss.
    `soft_table` is the teacher's logits for every training example (`distill.teacher_table`,
    None without a teacher); `taught` ([N] bool) the examples it learnt from. `density_weight`
    is GA-Net's λ for this step; `head` the labels' family (its training part's `loss`; None:
    read off the logits' shape, `evaluation.task_loss`)."""
    out = model(input_ids, attention_mask, details=True)
    loss = task_loss(out["logits"], labels, config.label_smoothing, head=head,
                     module=getattr(model, "head", None))
    total = loss
    if soft_table is not None:
        soft_targets = distillation.batch_targets(soft_table, rows, input_ids.shape[1])
        total = (1 - config.distill) * loss + config.distill * (
            distillation.distillation_loss(
                out["logits"], soft_targets, labels, config.distill_temperature,
                taught=None if taught is None else taught[rows]))
    if "density_penalty" in out:
        total = total + density_weight * out["density_penalty"]
    return StepLoss(out, loss, total)


def apply_update(total: torch.Tensor, model: Any, optimizer: torch.optim.Optimizer,
                 schedule: torch.optim.lr_scheduler.LRScheduler, average: Any = None) -> float:
    """Backpropagate `total`, clip the gradient norm to 1, step the optimizer, its learning-rate
    schedule and the weight average (a `WeightAverage`, or None); returns the learning rate this
    step used."""
    optimizer.zero_grad(set_to_none=True)
    total.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    learning_rate = optimizer.param_groups[0]["lr"]  # this step's
    optimizer.step()
    schedule.step()
    if average is not None:
        average.update()
    return learning_rate
