"""Model selection on a held-out set: keep the best evaluation's weights, stop without progress.

"Best" is the best primary metric (the family's `PRIMARY_METRIC`: the highest accuracy for the
built-in families; the lowest where `GREATER_IS_BETTER` is False), ties broken by the lower loss.
With a GA-Net density target only evaluations whose gate density is within `density_slack` above
the target compete (a model that is accurate because its gates are still open is not the sparse
model asked for); while none does, the one nearest the target is kept. Patience counts
evaluations without a new best.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn


@dataclass
class BestTracker:
    patience: int | None = None  # evaluations without a new best before stopping; None: never
    density_target: float | None = None
    density_slack: float = 0.05
    best: dict[str, Any] | None = None  # the best evaluation record so far
    state: dict[str, torch.Tensor] | None = field(default=None, repr=False)
    since_best: int = 0
    primary: str = "accuracy"  # the family's PRIMARY_METRIC
    greater_is_better: bool = True  # its GREATER_IS_BETTER

    def _key(self, record: dict[str, Any]) -> tuple:
        eligible = True
        distance = 0.0
        if self.density_target is not None and "density" in record:
            excess = record["density"] - self.density_target
            eligible = excess <= self.density_slack
            distance = max(0.0, excess)
        score = record[self.primary] if self.greater_is_better else -record[self.primary]
        if eligible:
            return (1, score, -record["loss"])
        return (0, -distance, score)

    def offer(self, record: dict[str, Any], model: nn.Module) -> bool:
        """Record one evaluation; True when it is the new best (its weights are then copied)."""
        if self.best is None or self._key(record) > self._key(self.best):
            self.best = record
            self.state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            self.since_best = 0
            return True
        self.since_best += 1
        return False

    @property
    def should_stop(self) -> bool:
        return self.patience is not None and self.since_best >= self.patience

    def restore(self, model: nn.Module) -> None:
        if self.state is not None:
            model.load_state_dict(self.state)
