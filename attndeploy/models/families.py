"""The training part of a model family, as the model and data layer reads it: the head a model
is built with, the labels a dataset holds, the keys of a JSONL line (`attndeploy.families`).

A family's `training.py` sits in this layer (it builds on `attndeploy.models.heads` and
`attndeploy.data`, and the layers below read nothing above them), so the checkpoint reader can
rebuild any family's model without the training loop. The train layer's loader
(`attndeploy.training.families.training_part`) returns the same module."""

from __future__ import annotations

import importlib
from types import ModuleType

from attndeploy.families.registry import FamilySpec, family_for_head


def training_part(family: FamilySpec | str) -> ModuleType:
    """The training module of `family` (a spec, or a head such as `classification`)."""
    spec = family_for_head(family) if isinstance(family, str) else family
    return importlib.import_module(spec.part("training"))
