"""Evolving attention's sub-config (`ModelConfig.evolving`)."""

from __future__ import annotations

from dataclasses import dataclass

from attndeploy.configbase import check_types, unit_interval
from attndeploy.errors import ConfigError


@dataclass(frozen=True)
class EvolvingConfig:
    """Evolving attention (docs/variants.md §4): paper notation, alpha = previous-logit weight."""

    alpha: float = 0.5
    beta: float = 1.0
    negative_slope: float = 0.0

    def __post_init__(self) -> None:
        check_types(self)
        unit_interval("alpha", self.alpha)
        unit_interval("beta", self.beta)
        if self.negative_slope < 0:
            raise ConfigError(f"negative_slope must be >= 0, got {self.negative_slope}")
