"""GA-Net: learn from a dense-gate teacher as well as from the labels.

With `TrainConfig.distill` = α > 0, `train` first trains the same model with the density penalty
off and no target (the dense-gate run the density target is judged against, chosen on the
validation split and not refit; on the real text benchmarks every one of its gates ends open),
then trains GA-Net on

    L = (1 − α)·L_task + α·T²·KL(softmax(z_teacher / T) ‖ softmax(z / T))  (+ λ·R, as before)

(Hinton et al., "Distilling the Knowledge in a Neural Network"; T = `distill_temperature`). The
teacher reads every word; its soft targets tell the gated student how sure to be on texts whose
telling words the gates closed. The KL term applies to the examples the teacher learnt from (its
training split): the refit's validation examples are texts it never saw, where its targets are
guesses (about one in five wrong on debian), so there the student learns from the labels alone.
The teacher's logits are computed once per training set (`teacher_table`): in eval mode they do
not change between epochs. Measured on the real-text benchmarks over five seeds
(benchmarks/README.md, `ganet_real_seeds.py`, `train_real.py`), at the same density: on fortunes
GA-Net went from 1.9 points under its dense-gate run to about 0.3 under; on debian, distilling on
every example cost 0.3 to 0.6 points, and reading the teacher on its own examples only gained 1.1
back. Inference is unchanged: the exported graph is the student's.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F

from attndeploy.training.evaluation import IGNORE_INDEX
from attndeploy.variants.registry import variant_spec


def dense_gate_config(model_config: Any) -> Any:
    """The teacher's ModelConfig: the same model with the density penalty off (the variant's
    `TrainingHooks.without_penalty` on its sub-config)."""
    spec = variant_spec(model_config.variant)
    return dataclasses.replace(  # the sub-config's field is the variant's name
        model_config, **{model_config.variant: spec.dense_gate(model_config.sub_config)})


def teacher_training(config: Any) -> Any:
    """The teacher's TrainConfig: no density target or calibration, no teacher, a third of any
    time budget, and no refit: the model kept is the one chosen on the validation split, whose
    soft targets on the training examples are softer than those of a model trained on to the
    best epoch + 2 on every example (a refit teacher gave GA-Net 0.8 points less on fortunes and
    0.5 more on debian over five seeds, benchmarks/README.md)."""
    return dataclasses.replace(
        config, density_target=None, density_calibrate=None, refit=False, distill=0.0,
        max_seconds=None if config.max_seconds is None else config.max_seconds / 3)


@torch.no_grad()
def teacher_table(teacher: Any, dataset: Any, batch_size: int) -> torch.Tensor:
    """The teacher's logits for every example of `dataset` (a TextDataset), computed once before
    training: [N, C] (tagging: [N, W, C], W the dataset's width, zero past each batch's width).
    The teacher is in eval mode (no dropout, hard gates), so an example's logits are the same in
    every epoch; reading them from the table saves a teacher forward pass per training step."""
    width = dataset.input_ids.shape[1]
    parts = []
    for input_ids, attention_mask, _ in dataset.batches(batch_size, shuffle=False):
        logits = teacher(input_ids, attention_mask)["logits"]  # [B, C] or [B, t, C]
        if logits.dim() == 3:
            logits = F.pad(logits, (0, 0, 0, width - logits.shape[1]))  # [B, W, C]
        parts.append(logits)
    return torch.cat(parts)  # [N, C] or [N, W, C]


def batch_targets(table: torch.Tensor, rows: torch.Tensor, width: int) -> torch.Tensor:
    """The teacher's logits for the batch of examples `rows` ([B]) trimmed to `width` tokens:
    [B, C] (tagging: [B, width, C])."""
    logits = table[rows]  # [B, C] or [B, W, C]
    return logits[:, :width] if logits.dim() == 3 else logits


def distillation_loss(logits: torch.Tensor, teacher: torch.Tensor, labels: torch.Tensor,
                      temperature: float, taught: torch.Tensor | None = None) -> torch.Tensor:
    """T²·KL(softmax(teacher / T) ‖ softmax(logits / T)), the mean over examples (tagging: over
    labelled tokens). logits, teacher [B, C] or [B, T, C]; labels [B] or [B, T]. `taught` [B]
    (bool): the examples the teacher learnt from; the others add 0 to the sum, so that on them
    the model learns from the labels alone, at their weight 1 − α (the mean stays over the whole
    batch)."""
    if logits.dim() == 3:  # tagging: keep the labelled tokens only
        keep = labels != IGNORE_INDEX  # [B, T]
        count = int(keep.sum())
        if taught is not None:
            keep = keep & taught[:, None]
    else:
        count, keep = logits.shape[0], taught  # keep: [B] or None (every example)
    if keep is not None:
        logits, teacher = logits[keep], teacher[keep]  # [N, C]
    kl = F.kl_div(F.log_softmax(logits / temperature, -1), F.log_softmax(teacher / temperature, -1),
                  log_target=True, reduction="sum") / max(count, 1)
    return temperature ** 2 * kl
