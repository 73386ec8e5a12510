"""The runtime part of a model family (numpy only: decode, the prediction contract's fields, the
wire codec, predict's table), imported by name from its spec (`attndeploy.families.registry`):
the one place this layer imports a family's runtime module.

A caller that knows the model (its metadata's head) asks `runtime_part`; one that holds only an
answer asks the registered families which one it is: `runtime_for_outputs` (a text model's
answer, by the family's fields) or `runtime_for_logits` (an id model's raw logits, by their
rank, when no metadata says more: the first family in order with that rank)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from attndeploy.families.registry import FamilySpec, family_for_head, family_specs

# The names every family's runtime part defines (docs/prediction-contract.md, "Family fields").
REQUIRED = ("FIELDS", "LOGITS_RANK", "wire_fields", "decode", "record", "encode_wire",
            "decode_wire", "TABLE_COLUMNS", "TABLE_FLEXIBLE", "TABLE_TEXT", "table_cells")

def runtime_part(family: FamilySpec | str) -> ModuleType:
    """The runtime module of `family` (a spec, or a head such as `classification`)."""
    spec = family_for_head(family) if isinstance(family, str) else family
    return importlib.import_module(spec.part("runtime"))


def runtime_for_outputs(outputs: Mapping[str, Any]) -> ModuleType | None:
    """The runtime module of the registered family whose every field `outputs` holds (the one
    with the most fields when several do), or None."""
    best: tuple[int, ModuleType] | None = None
    for spec in family_specs():
        module = runtime_part(spec)
        if all(name in outputs for name in module.FIELDS) and (
                best is None or len(module.FIELDS) > best[0]):
            best = (len(module.FIELDS), module)
    return best[1] if best is not None else None


def runtime_for_logits(logits: Any) -> ModuleType:
    """The runtime module of the first family (in order) whose logits have the rank of
    `logits` (an id model's answer read without its metadata); the first family if none."""
    specs = family_specs()
    for spec in specs:
        module = runtime_part(spec)
        if module.LOGITS_RANK == logits.ndim:
            return module
    return runtime_part(specs[0])
