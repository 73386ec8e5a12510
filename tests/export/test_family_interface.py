"""The model-level interface comes from the model family's spec (`FamilySpec.outputs`) and the
variant's gates: no head is named in `attndeploy.interface`."""

from __future__ import annotations

import pytest

from attndeploy.families.registry import family_specs
from attndeploy.interface import BATCH, SEQ, TensorSpec, model_interface, text_inputs

GATES = TensorSpec("gates", "bool", (BATCH, SEQ), "tokens the model attended to")


@pytest.mark.parametrize("gated", [False, True])
def test_every_family_s_outputs_then_the_gates(gated: bool):
    for spec in family_specs():
        interface = model_interface(head=spec.head, num_labels=3, gated=gated)
        assert interface.outputs == (*spec.outputs(3), *((GATES,) if gated else ()))
        assert interface.input_names == [t.name for t in (spec.inputs or text_inputs)()]


def test_a_head_no_family_has_is_a_value_error_naming_the_valid_ones():
    with pytest.raises(ValueError, match="unknown head 'regression'; valid: classification"):
        model_interface(head="regression", num_labels=1, gated=False)
