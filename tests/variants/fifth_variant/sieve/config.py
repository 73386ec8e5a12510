"""The `sieve` sub-config (`ModelConfig.sieve`)."""

from __future__ import annotations

from dataclasses import dataclass

from attndeploy.configbase import check_types, positive
from attndeploy.errors import ConfigError


@dataclass(frozen=True)
class SieveConfig:
    hidden: int = 16  # the scorer's hidden width
    bias_init: float = 2.0  # every gate starts open (logit > 0)
    temperature: float = 1.0  # training gates: sigmoid(s / temperature)
    density_weight: float = 1e-3  # the density penalty's starting weight

    def __post_init__(self) -> None:
        check_types(self)
        positive("hidden", self.hidden)
        positive("temperature", self.temperature)
        if self.density_weight < 0:
            raise ConfigError(f"density_weight must be >= 0, got {self.density_weight}")
