"""`DecoderConfig`: the shape of a small decoder-only causal language model (issue #49).

One frozen dataclass, validated on construction with errors that say what to do. `variant`
picks each block's causal attention (`attndeploy.variants`' causal forms): `standard`, `qvi`
(its causal `qvi_form`: `prefix` pooling or `pairwise`; the bidirectional `pooled` form is
refused, it reads future queries), `ganet` (one causal gate network per model, `ganet_aux`
`mlp` or `conv`; its hard gates decide which tokens enter the cache) or `evolving` (the
row-causal 3×3 convolution chained through the layers).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from attndeploy.errors import ConfigError

VARIANTS = ("standard", "qvi", "ganet", "evolving")
QVI_FORMS = ("prefix", "pairwise")
GANET_AUX = ("mlp", "conv")  # the LSTM gate network steps in Python: it cannot export
POSITIONS = ("learned", "rope")
NORMS = ("layer", "rms")
FFNS = ("gelu", "swiglu")
HEAD = "causal_lm"
ARCHITECTURE = "decoder"


@dataclass(frozen=True)
class DecoderConfig:
    """vocab_size: the tokenizer's; max_seq: the context (prompt + generated tokens);
    tie_embeddings: the LM head reuses the token embedding matrix.

    The block's parts (`attndeploy.models.decoder.layers`): our own small decoder's defaults
    (learned positions, LayerNorm, GELU, biases, one key/value head per query head) or a
    LLaMA-family model's (`positions` "rope" with `rope_theta`, `norm` "rms", `ffn` "swiglu",
    `bias` False, `n_kv_heads` < n_heads: grouped-query attention). `norm_eps` is the norms'.
    evolving_mix: the share of α and β in use (a warm start from a pretrained model: 0, where
    Evolving Attention computes the model's own attention; 1 once brought in)."""

    vocab_size: int
    variant: str = "standard"
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    d_ff: int = 128
    max_seq: int = 128
    dropout: float = 0.0
    tie_embeddings: bool = True
    qvi_form: str = "prefix"
    ganet_aux: str = "mlp"
    ganet_aux_hidden: int = 32
    evolving_alpha: float = 0.5
    evolving_beta: float = 1.0
    evolving_negative_slope: float = 0.0
    evolving_mix: float = 1.0
    n_kv_heads: int | None = None
    positions: str = "learned"
    rope_theta: float = 10000.0
    norm: str = "layer"
    norm_eps: float = 1e-5
    ffn: str = "gelu"
    bias: bool = True
    head: str = HEAD
    family: str = ARCHITECTURE

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ConfigError(f"unknown variant {self.variant!r} for a decoder; valid: "
                              f"{', '.join(VARIANTS)}")
        if self.qvi_form == "pooled":
            raise ConfigError("QVI form 'pooled' reads every query (it leaks future tokens), so "
                              "a decoder cannot use it: choose qvi_form 'prefix' or 'pairwise'")
        if self.qvi_form not in QVI_FORMS:
            raise ConfigError(f"qvi_form must be one of {', '.join(QVI_FORMS)}, "
                              f"got {self.qvi_form!r}")
        if self.ganet_aux not in GANET_AUX:
            raise ConfigError(f"a decoder's GA-Net gate network must be one of "
                              f"{', '.join(GANET_AUX)} (it exports with its state), got "
                              f"{self.ganet_aux!r}")
        for name in ("vocab_size", "d_model", "n_heads", "n_layers", "d_ff", "max_seq"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ConfigError(f"{name} must be a positive integer, got "
                                  f"{getattr(self, name)!r}")
        if self.d_model % self.n_heads:
            raise ConfigError(f"d_model {self.d_model} must be divisible by n_heads "
                              f"{self.n_heads}")
        for name, valid in (("positions", POSITIONS), ("norm", NORMS), ("ffn", FFNS)):
            if getattr(self, name) not in valid:
                raise ConfigError(f"{name} must be one of {', '.join(valid)}, got "
                                  f"{getattr(self, name)!r}")
        if self.n_kv_heads is not None and (
                not isinstance(self.n_kv_heads, int) or self.n_kv_heads < 1
                or self.n_heads % self.n_kv_heads):
            raise ConfigError(f"n_kv_heads must be a positive divisor of n_heads "
                              f"{self.n_heads}, got {self.n_kv_heads!r}")
        if self.positions == "rope" and (self.d_model // self.n_heads) % 2:
            raise ConfigError(f"rotary positions need an even head dimension, got "
                              f"{self.d_model // self.n_heads}")
        if not 0.0 <= self.evolving_mix <= 1.0:
            raise ConfigError(f"evolving_mix must be in [0, 1], got {self.evolving_mix}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.head != HEAD or self.family != ARCHITECTURE:
            raise ConfigError(f"a decoder config has head {HEAD!r} and family "
                              f"{ARCHITECTURE!r}, got {self.head!r}, {self.family!r}")

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: Any) -> DecoderConfig:
        """The config a checkpoint or an export stored; ConfigError naming an unknown key."""
        if not isinstance(raw, dict):
            raise ConfigError(f"a decoder config is a JSON object, got {type(raw).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ConfigError(f"unknown decoder config keys: {', '.join(unknown)}")
        try:
            return cls(**raw)
        except TypeError as exc:
            raise ConfigError(f"invalid decoder config: {exc}") from None
