"""Model configuration: one frozen dataclass, with one sub-config per variant, validated on
construction.

`ModelConfig` is what a checkpoint's `config.json` stores under `"model"`; `to_dict`/`from_dict`
round-trip it exactly. Its common fields are declared here; every variant whose `VariantSpec`
has a `config` adds a field of that name (`qvi`, `ganet`, `evolving`, ...), always present, with
the variant's defaults. Every check raises `ConfigError` with a message that says what to change.
The sub-config classes are importable from here by name (`from attndeploy.config import
GANetConfig`), found through the registry.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from attndeploy.configbase import check_types, choice, json_ready, positive, sub_from_dict
from attndeploy.errors import ConfigError
from attndeploy.families.registry import family_for_head, family_specs, heads
from attndeploy.variants.registry import variant_spec, variant_specs

FAMILIES = ("transformer", "bilstm")


def __getattr__(name: str) -> Any:
    """`HEADS`: every family's head (`attndeploy.families.registry.heads()`); a variant's
    sub-config class by its name, e.g. `GANetConfig`."""
    if name == "HEADS":
        return heads()
    for sub_cls in _sub_configs().values():
        if sub_cls.__name__ == name:
            return sub_cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

# (name, type as the annotation string `check_types` reads, default); first the required ones
_COMMON_FIELDS: tuple[tuple[str, str, Any], ...] = (
    ("vocab_size", "int", dataclasses.MISSING),
    ("num_labels", "int", dataclasses.MISSING),
    ("variant", "str", "standard"),
    ("family", "str", "transformer"),
    ("head", "str", "classification"),
    ("d_model", "int", 64),
    ("n_heads", "int", 4),
    ("n_layers", "int", 2),
    ("d_ff", "int", 128),
    ("max_seq", "int", 128),
    ("dropout", "float", 0.0),
    ("pool_hidden", "int", 32),
    ("lstm_hidden", "int", 100),
    ("tag_head", "str", "softmax"),
    ("char_cnn", "int", 0),  # the width of a convolution over the embeddings; 0: none
    ("crf_constraints", "str", "none"),  # a CRF's: "scheme" forbids what the tags' scheme does
)
# token-classification's decoders (`train --head`): a softmax per token, or a linear-chain CRF
TAG_HEADS = ("softmax", "crf")
# a CRF's constraint: none, or the sequences the label names' tagging scheme forbids (BIO,
# BIOES/BMES: `attndeploy.families.token_classification.scheme.allowed_transitions`)
CRF_CONSTRAINTS = ("none", "scheme")
# Fields added after exports existed, written only when not their default: every checkpoint and
# export made before them keeps its config (and so its metadata) byte for byte.
_WRITTEN_WHEN_SET = {"tag_head": "softmax", "char_cnn": 0, "crf_constraints": "none"}


def _sub_configs() -> dict[str, type]:
    """{field name: sub-config class} of every variant that has one, in variant order."""
    return {spec.name: spec.config for spec in variant_specs() if spec.config is not None}


class _ModelConfigMethods:
    """Checks and conversions of `ModelConfig` (its fields are built from the registry)."""

    def __post_init__(self) -> None:
        check_types(self)
        for name, sub_cls in _sub_configs().items():
            if not isinstance(getattr(self, name), sub_cls):
                raise ConfigError(f"{name} must be a {sub_cls.__name__}")
        spec = variant_spec(self.variant)  # an unknown variant lists the valid ones
        choice("model family", self.family, FAMILIES)
        choice("head", self.head, heads())
        choice("tag head", self.tag_head, TAG_HEADS)
        choice("CRF constraint", self.crf_constraints, CRF_CONSTRAINTS)
        if self.crf_constraints != "none" and self.tag_head != "crf":
            raise ConfigError(f"crf_constraints {self.crf_constraints!r} constrains a CRF: it "
                              f"needs tag_head 'crf', not {self.tag_head!r}")
        if self.char_cnn < 0 or (self.char_cnn and self.char_cnn % 2 == 0):
            raise ConfigError(f"char_cnn must be 0 (none) or an odd kernel width, so that each "
                              f"token keeps its place; got {self.char_cnn}")
        if self.char_cnn and self.family != "transformer":
            raise ConfigError("char_cnn convolves a transformer's embeddings; the "
                              f"{self.family} architecture has none")
        if self.tag_head != "softmax" and self.head != "tagging":
            raise ConfigError(f"a {self.tag_head} head decodes tags: it needs the tagging head "
                              f"(token-classification), not {self.head!r}")
        family = family_for_head(self.head)
        for name in ("vocab_size", "d_model", "n_heads", "n_layers", "d_ff", "max_seq",
                     "pool_hidden", "lstm_hidden"):
            positive(name, getattr(self, name))
        least = family.min_labels
        if self.num_labels < least:
            raise ConfigError(f"num_labels must be >= {least}, got {self.num_labels}")
        if self.d_model % self.n_heads:
            raise ConfigError(
                f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout must lie in [0, 1), got {self.dropout}")
        if self.family not in spec.families:
            valid = [s.name for s in variant_specs() if self.family in s.families]
            raise ConfigError(f"the {self.family} family supports variants "
                              f"{', '.join(valid)}, not {self.variant!r}")
        if self.family not in family.architectures:
            taking = [s.head for s in family_specs() if self.family in s.architectures]
            raise ConfigError(f"the {self.family} family takes the {' or '.join(taking)} "
                              f"head only, not {self.head!r}")
        spec.check(self)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def sub_config(self) -> Any:
        """The chosen variant's own sub-config (its field is the variant's name); None for a
        variant without one."""
        return getattr(self, self.variant, None)

    def to_dict(self) -> dict[str, Any]:
        raw = json_ready(dataclasses.asdict(self))
        for key, default in _WRITTEN_WHEN_SET.items():
            if raw.get(key) == default:
                del raw[key]
        return raw

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ModelConfig:
        if not isinstance(raw, dict):
            raise ConfigError("model config must be a JSON object")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ConfigError(f"unknown model config keys: {', '.join(unknown)}")
        values = dict(raw)
        for key, sub_cls in _sub_configs().items():
            if key in values:
                values[key] = sub_from_dict(sub_cls, values[key], key)
        try:
            return cls(**values)
        except TypeError as exc:
            raise ConfigError(f"model config is incomplete: {exc}") from exc

    def replace(self, **changes: Any) -> ModelConfig:
        return dataclasses.replace(self, **changes)


ModelConfig = dataclasses.make_dataclass(
    "ModelConfig",
    [
        *((name, annotation) if default is dataclasses.MISSING
          else (name, annotation, dataclasses.field(default=default))
          for name, annotation, default in _COMMON_FIELDS),
        *((name, sub_cls.__name__, dataclasses.field(default_factory=sub_cls))
          for name, sub_cls in _sub_configs().items()),
    ],
    bases=(_ModelConfigMethods,),
    frozen=True,
)
ModelConfig.__module__ = __name__
ModelConfig.__doc__ = (
    "Everything needed to rebuild a model; every variant's sub-config is always present."
)

