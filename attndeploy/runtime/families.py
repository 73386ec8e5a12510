"""The runtime part of a model family (numpy only: decode, the prediction contract's fields, the
wire codec), imported by name from its spec (`attndeploy.families.registry`): the one place this
layer imports a family's runtime module."""

from __future__ import annotations

import importlib
from types import ModuleType

from attndeploy.families.registry import FamilySpec, family_for_head


def runtime_part(family: FamilySpec | str) -> ModuleType:
    """The runtime module of `family` (a spec, or a head such as `classification`)."""
    spec = family_for_head(family) if isinstance(family, str) else family
    return importlib.import_module(spec.part("runtime"))
