"""Checks shared by every config dataclass (the model config and each variant's sub-config).

Every check raises `ConfigError` with a message that says what to change. No torch here: the
configs are read by light commands (info, package) too.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from attndeploy.errors import ConfigError

_SCALAR_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,), "float": (int, float), "str": (str,), "bool": (bool,)
}


def check_types(obj: Any) -> None:
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


# Generous but finite bounds on the model sizes a file may ask for (an attndeploy checkpoint's
# config.json, a Hugging Face config.json), checked before anything is built: far above what
# attndeploy trains (d_model 64, word vocabularies of 20 000) and the BERT-family encoders it
# converts (BERT-large: 1,024 wide, 24 layers, 512 positions), far below sizes whose meta model
# alone would take minutes to build (a million layers) or whose real one cannot fit in memory.
# `attndeploy.checkpoint` (MODEL_LIMITS) and `attndeploy.integrations.hf_config` (the same
# sizes under the names transformers gives them) both read this table.
SIZE_LIMITS: dict[str, int] = {
    "vocab_size": 10_000_000,
    "num_labels": 1_000_000,
    "d_model": 65_536,
    "n_heads": 1_024,
    "n_layers": 1_024,
    "d_ff": 262_144,
    "max_seq": 1_048_576,
    "pool_hidden": 65_536,
    "lstm_hidden": 65_536,
}


def above_limit(what: str, value: Any, limit: int) -> str | None:
    """`"<what> is <value>, above the limit of <limit>"` for an integer above `limit`, else None
    (whether it is an integer at all is the caller's check)."""
    if isinstance(value, int) and not isinstance(value, bool) and value > limit:
        return f"{what} is {value:,}, above the limit of {limit:,}"
    return None


def json_ready(value: Any) -> Any:
    """A config's dict as it reads back from JSON: tuples (e.g. GA-Net's `open_token_ids`) become
    lists, so a saved config compares equal to the one loaded from its `config.json`."""
    if isinstance(value, dict):
        return {key: json_ready(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(item) for item in value]
    return value


def choice(name: str, value: str, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise ConfigError(f"unknown {name} {value!r}; valid: {', '.join(valid)}")


# Which layers of a converted Hugging Face encoder carry a variant's departure from vanilla
# attention (GA-Net's `gated_layers`, Evolving Attention's `evolving_layers`; docs/variants.md §7).
LAYER_SPANS = ("all", "upper_half", "upper_third")


def layers_below(span: str, num_layers: int) -> int:
    """How many of the lowest layers a `LAYER_SPANS` choice leaves as they were: none for "all",
    the lower half (rounded down) for "upper_half", the lower two thirds (rounded down) for
    "upper_third"."""
    if span == "upper_half":
        return num_layers // 2
    if span == "upper_third":
        return num_layers * 2 // 3
    return 0


def unit_interval(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"{name} must lie in [0, 1], got {value}")


def positive(name: str, value: float) -> None:
    if not value > 0:
        raise ConfigError(f"{name} must be > 0, got {value}")


def sub_from_dict(sub_cls: type, raw: Any, key: str) -> Any:
    """A sub-config from its JSON object; missing keys take their defaults."""
    if isinstance(raw, sub_cls):
        return raw
    if not isinstance(raw, dict):
        raise ConfigError(f"model config {key!r} must be a JSON object")
    known = {f.name for f in dataclasses.fields(sub_cls)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"unknown {key} config keys: {', '.join(unknown)}")
    return sub_cls(**raw)  # types are checked on construction


_PARSERS: dict[str, Any] = {
    "int": int, "float": float, "str": str,
    "bool": lambda text: {"true": True, "false": False}[text.strip().lower()],
}


def with_options(config: Any, items: Any, what: str) -> Any:
    """`config` (a frozen dataclass) with `NAME=VALUE` strings applied, each VALUE read as its
    field's type (bool: true/false). An unknown name lists the valid ones."""
    fields = {f.name: f for f in dataclasses.fields(config)}
    changes: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or name not in fields:
            raise ConfigError(f"{what} option {item!r}: expected NAME=VALUE with NAME one of "
                              f"{', '.join(fields)}")
        annotation = fields[name].type
        annotation = annotation if isinstance(annotation, str) else annotation.__name__
        try:
            changes[name] = _PARSERS.get(annotation, str)(text)
        except (ValueError, KeyError):
            raise ConfigError(f"{what} option {name}: {text!r} is not a {annotation}") from None
    return dataclasses.replace(config, **changes)
