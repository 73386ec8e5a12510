"""The training part of a model family (torch: data, head, loss, metrics, baseline), imported by
name from its spec (`attndeploy.families.registry`): the one place this layer imports a family's
training module."""

from __future__ import annotations

import importlib
from types import ModuleType

from attndeploy.families.registry import FamilySpec, family_for_head


def training_part(family: FamilySpec | str) -> ModuleType:
    """The training module of `family` (a spec, or a head such as `classification`)."""
    spec = family_for_head(family) if isinstance(family, str) else family
    return importlib.import_module(spec.part("training"))
