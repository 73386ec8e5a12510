"""Model configuration: one frozen dataclass per variant, validated on construction.

`ModelConfig` is what a checkpoint's `config.json` stores under `"model"`; `to_dict`/`from_dict`
round-trip it exactly. Every check raises `ConfigError` with a message that says what to change.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from attndeploy.errors import ConfigError

FAMILIES = ("transformer", "bilstm")
HEADS = ("classification", "tagging")


_SCALAR_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,), "float": (int, float), "str": (str,), "bool": (bool,)
}


def _check_types(obj: Any) -> None:
    """Scalar fields must hold their annotated type (a corrupt config.json must not slip through
    as a TypeError later); bools are not accepted as numbers."""
    for f in dataclasses.fields(obj):
        annotation = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
        valid = _SCALAR_TYPES.get(annotation)
        if valid is None:
            continue
        value = getattr(obj, f.name)
        if not isinstance(value, valid) or (isinstance(value, bool) and bool not in valid):
            raise ConfigError(f"{f.name} must be of type {annotation}, got {value!r}")


def _choice(name: str, value: str, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise ConfigError(f"unknown {name} {value!r}; valid: {', '.join(valid)}")


def _unit_interval(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"{name} must lie in [0, 1], got {value}")


def _positive(name: str, value: float) -> None:
    if not value > 0:
        raise ConfigError(f"{name} must be > 0, got {value}")


@dataclass(frozen=True)
class QVIConfig:
    """Query-value interaction (variants.md §2). `pairwise_chunk` = query block size."""

    form: str = "pooled"
    pairwise_chunk: int = 64

    def __post_init__(self) -> None:
        _check_types(self)
        _choice("qvi form", self.form, ("pooled", "pairwise"))
        _positive("pairwise_chunk", self.pairwise_chunk)


@dataclass(frozen=True)
class GANetConfig:
    """Gated attention (variants.md §3). `density_weight` is the paper's lambda."""

    aux: str = "mlp"
    aux_hidden: int = 128
    aux_bias_init: float = 0.0
    temperature: float = 1.0
    density_weight: float = 4e-4
    gate_mode: str = "threshold"
    straight_through: bool = False
    gather_open_keys: bool = False

    def __post_init__(self) -> None:
        _check_types(self)
        _choice("ganet aux network", self.aux, ("mlp", "conv", "bilstm"))
        _choice("gate_mode", self.gate_mode, ("threshold", "sample"))
        _positive("aux_hidden", self.aux_hidden)
        _positive("temperature", self.temperature)
        if self.density_weight < 0:
            raise ConfigError(f"density_weight must be >= 0, got {self.density_weight}")


@dataclass(frozen=True)
class EvolvingConfig:
    """Evolving attention (variants.md §4): paper notation, alpha = previous-logit weight."""

    alpha: float = 0.5
    beta: float = 1.0
    negative_slope: float = 0.0

    def __post_init__(self) -> None:
        _check_types(self)
        _unit_interval("alpha", self.alpha)
        _unit_interval("beta", self.beta)
        if self.negative_slope < 0:
            raise ConfigError(f"negative_slope must be >= 0, got {self.negative_slope}")


@dataclass(frozen=True)
class ModelConfig:
    """Everything needed to rebuild a model; the variant sub-configs are always present."""

    vocab_size: int
    num_labels: int
    variant: str = "standard"
    family: str = "transformer"
    head: str = "classification"
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    d_ff: int = 128
    max_seq: int = 128
    dropout: float = 0.0
    pool_hidden: int = 32
    lstm_hidden: int = 100
    qvi: QVIConfig = field(default_factory=QVIConfig)
    ganet: GANetConfig = field(default_factory=GANetConfig)
    evolving: EvolvingConfig = field(default_factory=EvolvingConfig)

    def __post_init__(self) -> None:
        from attndeploy.variants.registry import variant_names

        _check_types(self)
        for name, sub_cls in (("qvi", QVIConfig), ("ganet", GANetConfig),
                              ("evolving", EvolvingConfig)):
            if not isinstance(getattr(self, name), sub_cls):
                raise ConfigError(f"{name} must be a {sub_cls.__name__}")
        _choice("variant", self.variant, variant_names())
        _choice("model family", self.family, FAMILIES)
        _choice("head", self.head, HEADS)
        for name in ("vocab_size", "d_model", "n_heads", "n_layers", "d_ff", "max_seq",
                     "pool_hidden", "lstm_hidden"):
            _positive(name, getattr(self, name))
        if self.num_labels < 2:
            raise ConfigError(f"num_labels must be >= 2, got {self.num_labels}")
        if self.d_model % self.n_heads:
            raise ConfigError(
                f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout must lie in [0, 1), got {self.dropout}")
        if self.family == "bilstm":
            if self.variant not in ("standard", "ganet"):
                raise ConfigError(
                    f"the bilstm family supports variants standard and ganet, not {self.variant!r}"
                )
            if self.head != "classification":
                raise ConfigError("the bilstm family has a classification head only")
            if self.variant == "ganet" and self.ganet.aux != "bilstm":
                raise ConfigError(
                    "the bilstm family's GA-Net model uses the paper's BiLSTM gate network: "
                    "set ganet aux to 'bilstm'"
                )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ModelConfig:
        if not isinstance(raw, dict):
            raise ConfigError("model config must be a JSON object")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ConfigError(f"unknown model config keys: {', '.join(unknown)}")
        subs = {"qvi": QVIConfig, "ganet": GANetConfig, "evolving": EvolvingConfig}
        values = dict(raw)
        for key, sub_cls in subs.items():
            if key in values:
                values[key] = _sub_from_dict(sub_cls, values[key], key)
        try:
            return cls(**values)
        except TypeError as exc:
            raise ConfigError(f"model config is incomplete: {exc}") from exc

    def replace(self, **changes: Any) -> ModelConfig:
        return dataclasses.replace(self, **changes)


def _sub_from_dict(sub_cls: type, raw: Any, key: str) -> Any:
    if isinstance(raw, sub_cls):
        return raw
    if not isinstance(raw, dict):
        raise ConfigError(f"model config {key!r} must be a JSON object")
    known = {f.name for f in dataclasses.fields(sub_cls)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"unknown {key} config keys: {', '.join(unknown)}")
    return sub_cls(**raw)  # missing keys take their defaults; types are checked on construction
