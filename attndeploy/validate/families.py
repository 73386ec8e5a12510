"""The checks part of a model family (parity, the validation grid, quantize's and debug's checks),
imported by name from its spec (`attndeploy.families.registry`): the one place this layer
imports a family's checks module."""

from __future__ import annotations

import importlib
from types import ModuleType

from attndeploy.families.registry import FamilySpec, family_for_head


def checks_part(family: FamilySpec | str) -> ModuleType:
    """The checks module of `family` (a spec, or a head such as `classification`)."""
    spec = family_for_head(family) if isinstance(family, str) else family
    return importlib.import_module(spec.part("checks"))
