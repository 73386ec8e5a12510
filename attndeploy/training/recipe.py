"""A recipe sized to the data: how many epochs a fine-tune runs on the set it is given.

A fixed number of epochs is a fixed number of passes, not of optimizer steps: 4 epochs of
batches of 32 are about 400 steps on 3,300 training texts but 100 on 800 and 28 on 200, too few
for the new head, the variant's own parameters and GA-Net's density controller to settle
(issue #54: on 818 texts every variant stayed under naive Bayes). `sized_for` raises
`max_epochs` until the run can take `min_steps` steps, so a small set trains more epochs and a
large one keeps the recipe as it was; `steps` still caps the run.
"""

from __future__ import annotations

import math
from dataclasses import replace

from attndeploy.training.config import TrainConfig


def steps_per_epoch(config: TrainConfig, examples: int) -> int:
    """Optimizer steps in one pass over `examples` training examples."""
    return max(1, math.ceil(examples / config.batch_size))


def sized_for(config: TrainConfig, examples: int) -> TrainConfig:
    """`config` for a training set of `examples`: `max_epochs` raised to the fewest epochs that
    reach `min_steps` steps (never lowered); unchanged when `min_steps` is 0 or `max_epochs` is
    None (then `steps` alone ends the run)."""
    if not config.min_steps or config.max_epochs is None:
        return config
    needed = math.ceil(config.min_steps / steps_per_epoch(config, examples))
    return replace(config, max_epochs=max(config.max_epochs, needed))
