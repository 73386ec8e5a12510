"""GA-Net: steer the hard-gate density to a target by adapting the regulariser's weight λ.

The loss is L_task + λ·R (docs/variants.md §3.5); a fixed λ gives whatever density the data happens
to settle at (0.44 to 1.0 on real text at the paper's λ = 4e-4, depending on the initialisation).
Here λ follows the density the model would have in eval mode. After every step, with d the training
batch's hard-gate density (gates decided on the logits, s > 0, as evaluation decides),

    e  ← 0.9·e + 0.1·(d − target)              (a running mean of the error: batches are noisy)
    I  ← I + rate·e                            (integral part, log-space)
    λ  = clip(exp(I + gain·e), λ_min, λ_max)   (plus a proportional part)

λ grows while the gates are too dense and shrinks when they are too sparse. The proportional
part lets λ fall as soon as the density crosses the target, which a pure integral would only do
after the error had been negative for a while: the density then overshoots far below the target
(measured on real text: 0.13 and 0.16 for a target of 0.3). λ starts at `START_WEIGHT` unless
the configured weight is larger: the paper's 4e-4 is far below what holds real text at 0.3
(0.07 to 0.16 on both benchmark sets), and climbing from there took 6 to 8 of the few epochs
there are. The penalty only ever pushes gates closed: when the task itself wants fewer gates
than the target (the built-in sparse_evidence task settles near 0.07), λ sinks to its floor and
the density stays below the target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from attndeploy.errors import ConfigError

EMA = 0.1
GAIN = 2.0
START_WEIGHT = 0.1
WEIGHT_BOUNDS = (1e-5, 10.0)
DENSITY_TOLERANCE = 0.1  # how far the held-out density may sit from its target (issue #54)


@dataclass
class DensityController:
    target: float
    weight: float  # λ; the starting value is max(this, START_WEIGHT)
    rate: float = 0.02
    error: float = 0.0  # running mean of (density − target)
    integral: float = field(init=False)

    def __post_init__(self) -> None:
        if not 0.0 < self.target < 1.0:
            raise ConfigError(f"the density target must lie in (0, 1), got {self.target}")
        if not self.rate > 0:
            raise ConfigError(f"the density controller's rate must be > 0, got {self.rate}")
        low, high = WEIGHT_BOUNDS
        self.weight = min(max(self.weight, START_WEIGHT, low), high)
        self.integral = math.log(self.weight)

    def update(self, batch_density: float, target: float | None = None) -> float:
        """Take one training batch's hard-gate density; returns λ for the next step. `target`
        overrides the configured target for this step (a scheduled one)."""
        goal = self.target if target is None else target
        self.error += EMA * (batch_density - goal - self.error)
        low, high = WEIGHT_BOUNDS
        self.integral = min(max(self.integral + self.rate * self.error, math.log(low)),
                            math.log(high))
        self.weight = min(max(math.exp(self.integral + GAIN * self.error), low), high)
        return self.weight


def scheduled_target(target: float, epoch: float, *, warmup: float, anneal: float
                     ) -> float | None:
    """The density the controller steers to after `epoch` epochs of training.

    None during the first `warmup` epochs: no penalty, the gates and the task train together
    first. Then a straight line from all open (1.0) down to `target` over `anneal` epochs, so that
    gates close a few at a time, the least useful first, instead of all at once before the model
    knows which tokens matter.
    """
    if epoch < warmup:
        return None
    if anneal <= 0:
        return target
    progress = min(1.0, (epoch - warmup) / anneal)
    return 1.0 - (1.0 - target) * progress


def density_shortfall(metrics: dict[str, Any], summary: dict[str, Any]) -> str | None:
    """Why the held-out gate density (`metrics`) misses its target by more than
    `DENSITY_TOLERANCE`, in one sentence; None when it is within, or without a target. Reads
    the run's gate calibration (`summary["gate_calibration"]`) to tell the causes apart."""
    target, density = metrics.get("density_target"), metrics.get("density")
    if target is None or density is None or abs(density - target) <= DENSITY_TOLERANCE:
        return None
    head = f"the held-out gate density {density:.3f} misses its target {target:g} by more than " \
           f"{DENSITY_TOLERANCE:g}"
    calibration = summary.get("gate_calibration")
    if calibration is None:
        return (f"{head}: the density penalty only pushes gates closed and the controller "
                "alone left them there; --density-calibrate TARGET moves the gate threshold to "
                "it on the training texts after training")
    reached = calibration["density_after"]
    on = calibration.get("on", "training")
    if abs(reached - target) > DENSITY_TOLERANCE:
        return (f"{head}: no gate threshold gives that density on the {on} texts (the "
                f"nearest is {reached:.3f}): their tokens share too few distinct gate scores, "
                "or texts this short leave too few tokens to gate")
    return (f"{head}, though the {on} texts reach {reached:.3f}: the held-out texts gate "
            "differently from those the threshold was set on")
