"""GA-Net's sub-config (`ModelConfig.ganet`)."""

from __future__ import annotations

from dataclasses import dataclass

from attndeploy.configbase import check_types, choice, positive
from attndeploy.errors import ConfigError

RELAXATIONS = ("concrete", "hard_concrete")


@dataclass(frozen=True)
class GANetConfig:
    """Gated attention (docs/variants.md §3). `density_weight` is the paper's lambda."""

    aux: str = "mlp"
    aux_hidden: int = 128
    aux_bias_init: float = 0.0
    temperature: float = 1.0
    relaxation: str = "concrete"  # training gates: "concrete" (the paper's) or "hard_concrete"
    density_weight: float = 4e-4
    gate_mode: str = "threshold"
    straight_through: bool = False
    gather_open_keys: bool = False

    def __post_init__(self) -> None:
        check_types(self)
        choice("ganet aux network", self.aux, ("mlp", "conv", "bilstm"))
        choice("gate_mode", self.gate_mode, ("threshold", "sample"))
        choice("gate relaxation", self.relaxation, RELAXATIONS)
        positive("aux_hidden", self.aux_hidden)
        positive("temperature", self.temperature)
        if self.density_weight < 0:
            raise ConfigError(f"density_weight must be >= 0, got {self.density_weight}")
