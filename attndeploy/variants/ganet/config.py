"""GA-Net's sub-config (`ModelConfig.ganet`)."""

from __future__ import annotations

from dataclasses import dataclass

from attndeploy.configbase import LAYER_SPANS, check_types, choice, positive
from attndeploy.errors import ConfigError

RELAXATIONS = ("concrete", "hard_concrete")
AUX_NETWORKS = ("mlp", "conv", "bilstm")
GATE_MODES = ("threshold", "sample")


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
    open_token_ids: tuple[int, ...] = ()  # tokens whose gates never close (in a converted
    # Hugging Face model; e.g. [CLS] and [SEP], the keys its pretrained heads park attention on)
    gated_layers: str = "all"  # which layers of a converted Hugging Face model gate their keys:
    # "all", "upper_half" or "upper_third" (the layers below attend every key; docs/variants.md §7)

    def __post_init__(self) -> None:
        check_types(self)
        ids = tuple(self.open_token_ids)  # a list after a JSON round trip
        if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
            raise ConfigError(f"open_token_ids must be token ids (ints >= 0), got {ids!r}")
        object.__setattr__(self, "open_token_ids", ids)
        choice("ganet aux network", self.aux, AUX_NETWORKS)
        choice("gate_mode", self.gate_mode, GATE_MODES)
        choice("gate relaxation", self.relaxation, RELAXATIONS)
        choice("gated_layers", self.gated_layers, LAYER_SPANS)
        positive("aux_hidden", self.aux_hidden)
        positive("temperature", self.temperature)
        if self.density_weight < 0:
            raise ConfigError(f"density_weight must be >= 0, got {self.density_weight}")
