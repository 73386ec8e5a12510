"""`Seq2SeqConfig`: the shape of a small encoder-decoder translation model (issue #51).

`variant` picks the attention of all three kinds at once (docs/translation.md):
encoder self-attention (the bidirectional layers: QVI `pooled`, GA-Net gates from a gate
network over the source, Evolving Attention's 'same' 3×3 conv chained through the encoder),
decoder self-attention (the causal forms of `attndeploy.variants.*.causal`, as the decoder-only
model's) and cross-attention (`attndeploy.models.seq2seq.cross`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from attndeploy.errors import ConfigError

VARIANTS = ("standard", "qvi", "ganet", "evolving")
QVI_FORMS = ("prefix", "pairwise")
QVI_CROSS_FORMS = ("pooled", "pairwise")
HEAD = "translation"
ARCHITECTURE = "seq2seq"


@dataclass(frozen=True)
class Seq2SeqConfig:
    """vocab_size: the shared (source and target) BPE vocabulary's; max_source / max_target:
    the longest source and target in tokens (target: with its end token); tie_embeddings: one
    matrix embeds the source, the target and is the output layer. qvi_form: the decoder
    self-attention's causal QVI form (the encoder uses `pooled`); qvi_cross_form: the
    cross-attention's (`cross`: `pooled` makes the source's Ṽ once, `pairwise` pairs every
    decoder query with every value). A stored config without qvi_cross_form was written when
    cross-attention was always `pairwise`, and reads as that."""

    vocab_size: int
    variant: str = "standard"
    d_model: int = 128
    n_heads: int = 4
    encoder_layers: int = 2
    decoder_layers: int = 2
    d_ff: int = 256
    max_source: int = 64
    max_target: int = 64
    dropout: float = 0.1
    tie_embeddings: bool = True
    qvi_form: str = "prefix"
    qvi_cross_form: str = "pooled"
    ganet_aux_hidden: int = 32
    ganet_temperature: float = 1.0
    evolving_alpha: float = 0.5
    evolving_beta: float = 1.0
    evolving_negative_slope: float = 0.0
    head: str = HEAD
    family: str = ARCHITECTURE

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ConfigError(f"unknown variant {self.variant!r} for a translation model; "
                              f"valid: {', '.join(VARIANTS)}")
        if self.qvi_form not in QVI_FORMS:
            raise ConfigError(f"a translation decoder's qvi_form must be one of "
                              f"{', '.join(QVI_FORMS)} (causal), got {self.qvi_form!r}")
        if self.qvi_cross_form not in QVI_CROSS_FORMS:
            raise ConfigError(f"a translation model's qvi_cross_form must be one of "
                              f"{', '.join(QVI_CROSS_FORMS)}, got {self.qvi_cross_form!r}")
        for name in ("vocab_size", "d_model", "n_heads", "encoder_layers", "decoder_layers",
                     "d_ff", "max_source", "max_target", "ganet_aux_hidden"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.d_model % self.n_heads:
            raise ConfigError(f"d_model {self.d_model} must be divisible by n_heads "
                              f"{self.n_heads}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.head != HEAD or self.family != ARCHITECTURE:
            raise ConfigError(f"a translation config has head {HEAD!r} and family "
                              f"{ARCHITECTURE!r}, got {self.head!r}, {self.family!r}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: Any) -> Seq2SeqConfig:
        """The config a checkpoint or an export stored; ConfigError naming an unknown key."""
        if not isinstance(raw, dict):
            raise ConfigError(f"a translation config is a JSON object, got "
                              f"{type(raw).__name__}")
        unknown = sorted(set(raw) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ConfigError(f"unknown translation config keys: {', '.join(unknown)}")
        raw = {"qvi_cross_form": "pairwise", **raw}  # written before the key: pairwise
        try:
            return cls(**raw)
        except TypeError as exc:
            raise ConfigError(f"invalid translation config: {exc}") from None
