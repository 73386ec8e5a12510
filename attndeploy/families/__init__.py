"""Model families: one `FamilySpec` per kind of model (text classification, token
classification, and the kinds to come), as `attndeploy.variants` has one `VariantSpec` per
attention variant. See `registry.py` and docs/adding-a-family.md."""

from __future__ import annotations

from attndeploy.families.registry import (
    FamilySpec,
    family_for_head,
    family_names,
    family_spec,
    family_specs,
    register_family,
)

__all__ = ["FamilySpec", "family_for_head", "family_names", "family_spec", "family_specs",
           "register_family"]
