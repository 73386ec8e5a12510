"""Registry of attention variants by name (a decorator refuses duplicates)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from attndeploy.errors import ConfigError

T = TypeVar("T")

# The names are fixed here so that configs can be validated without importing torch modules.
VARIANT_NAMES = ("standard", "qvi", "ganet", "evolving")
_REGISTRY: dict[str, type] = {}


def variant_names() -> tuple[str, ...]:
    return VARIANT_NAMES


def register_variant(name: str) -> Callable[[type[T]], type[T]]:
    """Class decorator: register an attention layer class under `name`."""

    def decorate(cls: type[T]) -> type[T]:
        if name not in VARIANT_NAMES:
            raise ConfigError(f"variant {name!r} is not declared in VARIANT_NAMES")
        if name in _REGISTRY:
            raise ConfigError(f"variant {name!r} is registered twice")
        _REGISTRY[name] = cls
        return cls

    return decorate


def get_variant(name: str) -> type:
    """The attention layer class registered as `name`; an unknown name lists the valid ones."""
    import attndeploy.variants  # noqa: F401  (imports every variant module, which registers it)

    try:
        return _REGISTRY[name]
    except KeyError:
        raise ConfigError(
            f"unknown variant {name!r}; valid: {', '.join(sorted(_REGISTRY))}"
        ) from None


def registered_variants() -> dict[str, type]:
    import attndeploy.variants  # noqa: F401

    return dict(_REGISTRY)
