"""The learning-rate schedule: linear warm-up, then cosine or linear decay to 0 at the horizon.

Cosine (`TrainConfig.schedule = "cosine"`, the default) is what the built-in tasks and `--data`
were tuned with. Linear decay after a warm-up of a share of the steps is the usual recipe for
fine-tuning a pretrained BERT-family encoder (the BERT paper; Hugging Face's
`get_linear_schedule_with_warmup`), which `train --hf-model` uses on pretrained weights.
"""

from __future__ import annotations

import math

from attndeploy.training.config import TrainConfig


def warmup_steps(config: TrainConfig, horizon: int) -> int:
    """`warmup_fraction` of the horizon when set (at least 1 step), else `warmup_steps`."""
    if config.warmup_fraction is None:
        return config.warmup_steps
    return max(1, round(config.warmup_fraction * horizon))


def learning_rate_factor(step: int, config: TrainConfig, horizon: int | None = None) -> float:
    """The factor on the learning rate at `step` (0-based) of a run of `horizon` steps (default
    `config.steps`): linear warm-up, then `config.schedule`'s decay to 0 at the horizon."""
    horizon = config.steps if horizon is None else horizon
    warmup = warmup_steps(config, horizon)
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, horizon - warmup))
    if config.schedule == "linear":
        return 1.0 - progress
    return 0.5 * (1 + math.cos(math.pi * progress))
