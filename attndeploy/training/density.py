"""GA-Net: steer the hard-gate density to a target by adapting the regulariser's weight λ.

The loss is L_task + λ·R (variants.md §3.5); a fixed λ gives whatever density the data happens to
settle at (0.6 on real text at the paper's λ = 4e-4). Here λ follows the density the model would
have in eval mode: after every step, with d the training batch's hard-gate density (gates
decided on the logits, s > 0, exactly as evaluation decides them),

    d̄ ← 0.9·d̄ + 0.1·d                       (a running mean: one batch is noisy)
    λ ← clip(λ · exp(rate · (d̄ − target) / target), λ_min, λ_max)

a multiplicative (log-space) integral controller: λ grows while the gates are too dense and
shrinks when they are too sparse, so the gates settle near the target whatever the data. Its
state is plain numbers, recorded in the training history.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from attndeploy.errors import ConfigError

EMA = 0.1
WEIGHT_BOUNDS = (1e-5, 10.0)


@dataclass
class DensityController:
    target: float
    weight: float  # λ, starting from the config's density_weight
    rate: float = 0.05
    mean_density: float | None = None

    def __post_init__(self) -> None:
        if not 0.0 < self.target < 1.0:
            raise ConfigError(f"the density target must lie in (0, 1), got {self.target}")
        if not self.rate > 0:
            raise ConfigError(f"the density controller's rate must be > 0, got {self.rate}")
        low, high = WEIGHT_BOUNDS
        self.weight = min(max(self.weight, low), high)

    def update(self, batch_density: float) -> float:
        """Take one training batch's hard-gate density; returns λ for the next step."""
        if self.mean_density is None:
            self.mean_density = batch_density
        else:
            self.mean_density += EMA * (batch_density - self.mean_density)
        error = (self.mean_density - self.target) / self.target
        low, high = WEIGHT_BOUNDS
        self.weight = min(max(self.weight * math.exp(self.rate * error), low), high)
        return self.weight
