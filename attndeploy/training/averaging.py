"""An exponential moving average of the weights (Polyak averaging), evaluated and saved instead
of the last step's weights.

On a few thousand examples the weights of single steps jump from batch to batch; their running
average is a smoother, better-generalising model at no extra training cost. After step t,

    w̄ ← d_t·w̄ + (1 − d_t)·w,   d_t = min(decay, (1 + t) / (10 + t))

(the ramp lets the average forget the random initialisation quickly). Buffers are copied as they
are. `swapped_in` puts the average into the model for an evaluation or a copy, then puts the
trained weights back.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from attndeploy.errors import ConfigError


class WeightAverage:
    def __init__(self, model: nn.Module, decay: float) -> None:
        if not 0.0 < decay < 1.0:
            raise ConfigError(f"the weight-average decay must lie in (0, 1), got {decay}")
        self.decay = decay
        self.updates = 0
        self._params = [p for p in model.parameters() if p.requires_grad]
        self.average = [p.detach().clone() for p in self._params]

    @torch.no_grad()
    def update(self) -> None:
        self.updates += 1
        decay = min(self.decay, (1 + self.updates) / (10 + self.updates))
        torch._foreach_mul_(self.average, decay)
        torch._foreach_add_(self.average, [p.detach() for p in self._params], alpha=1 - decay)

    @torch.no_grad()
    def copy_to_model(self) -> None:
        """Replace the trained weights by the average for good."""
        for param, average in zip(self._params, self.average, strict=True):
            param.copy_(average)

    @contextmanager
    def swapped_in(self) -> Iterator[None]:
        trained = [p.detach().clone() for p in self._params]
        self.copy_to_model()
        try:
            yield
        finally:
            with torch.no_grad():
                for param, value in zip(self._params, trained, strict=True):
                    param.copy_(value)
