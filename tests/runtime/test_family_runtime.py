"""Every registered family's runtime part (`attndeploy/families/<package>/runtime.py`) follows
the protocol docs/prediction-contract.md ("Family fields") describes, round-trips its fields
through the wire and imports only what a served text model ships."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import numpy as np
import pytest

from attndeploy.families.registry import family_specs
from attndeploy.runtime.contract import decode_wire, encode_wire, wire_fields, wire_outputs
from attndeploy.runtime.families import REQUIRED as PROTOCOL
from attndeploy.runtime.families import runtime_for_outputs, runtime_part
from attndeploy.runtime.shipping import SHIPPED_MODULES
from attndeploy.runtime.text import decode_batch

SPECS = family_specs()
TOKENS = [["a", "b", "c"], ["d"], ["e", "f"]]  # rows of different lengths


@pytest.mark.parametrize("spec", SPECS, ids=[spec.name for spec in SPECS])
def test_a_family_s_runtime_part_defines_the_protocol(spec) -> None:
    module = runtime_part(spec)
    assert [name for name in PROTOCOL if not hasattr(module, name)] == []
    fields = module.wire_fields(3)
    assert tuple(field.name for field in fields) == tuple(module.FIELDS)
    assert {field.datatype for field in fields} <= {"BYTES", "FP32"}


@pytest.mark.parametrize("spec", SPECS, ids=[spec.name for spec in SPECS])
def test_a_family_s_fields_round_trip_through_the_wire(spec) -> None:
    module = runtime_part(spec)
    names = ("x", "y", "z")
    width = max(len(row) for row in TOKENS)
    shape = (len(TOKENS), width, len(names))[: module.LOGITS_RANK - 1] + (len(names),)
    logits = np.random.default_rng(0).normal(0, 2, shape).astype(np.float32)
    gates = np.ones((len(TOKENS), width), bool)
    predictions = decode_batch(logits, gates, TOKENS, names, family=module)
    wire = encode_wire(predictions, gated=True)
    assert tuple(wire) == wire_outputs(gated=True, family=module)
    for field in wire_fields(module, num_labels=len(names), gated=True):
        assert wire[field.name].ndim == len(field.dims) + 1, field.name
    assert runtime_for_outputs(wire) is module
    for row, prediction in enumerate(predictions):
        assert decode_wire(wire, names, row=row, family=module) == prediction.to_dict()
        assert list(prediction.to_dict()) == ["tokens", *module.FIELDS, "attended"]
        assert len(module.table_cells(prediction)) == len(module.TABLE_COLUMNS)


@pytest.mark.parametrize("spec", SPECS, ids=[spec.name for spec in SPECS])
def test_a_family_s_runtime_part_imports_only_what_a_text_model_ships(spec) -> None:
    path = Path(runtime_part(spec).__file__)
    allowed = {name for name, _ in SHIPPED_MODULES} | {"numpy"}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        for name in names:
            top = name.split(".")[0]
            assert name in allowed or top in sys.stdlib_module_names or name == "__future__", (
                f"{path}: imports {name}")
