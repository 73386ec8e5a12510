"""Evolving attention's sub-config (`ModelConfig.evolving`)."""

from __future__ import annotations

from dataclasses import dataclass

from attndeploy.configbase import LAYER_SPANS, check_types, choice, layers_below, unit_interval
from attndeploy.errors import ConfigError


@dataclass(frozen=True)
class EvolvingConfig:
    """Evolving attention (docs/variants.md §4): paper notation, alpha = previous-logit weight."""

    alpha: float = 0.5
    beta: float = 1.0
    negative_slope: float = 0.0
    evolving_layers: str = "all"  # which layers of a converted Hugging Face model mix in the
    # previous layer's logits: "all", "upper_half" or "upper_third" (the layers below are vanilla
    # attention, each starting the chain anew; docs/variants.md §7)

    def __post_init__(self) -> None:
        check_types(self)
        unit_interval("alpha", self.alpha)
        unit_interval("beta", self.beta)
        if self.negative_slope < 0:
            raise ConfigError(f"negative_slope must be >= 0, got {self.negative_slope}")
        choice("evolving_layers", self.evolving_layers, LAYER_SPANS)

    def chain_starts(self, num_layers: int) -> int:
        """How many of the lowest layers of `num_layers` start the chain (vanilla attention, no
        conv): layer 0 always, and every layer below `evolving_layers`; the top one of them hands
        its logits to the first layer that mixes."""
        return max(1, layers_below(self.evolving_layers, num_layers))
