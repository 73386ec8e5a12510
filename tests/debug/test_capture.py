"""`attndeploy.debug.capture`: the PyTorch side, every op call and block output of one forward."""

from __future__ import annotations

import pytest
import torch

from attndeploy.debug.capture import Recording, recording_modules, recording_op_calls
from attndeploy.variants import functional
from tests.nn.toy_models import EvolvingChain, example_inputs

pytestmark = pytest.mark.usefixtures("torch_defaults")


def test_every_op_call_is_recorded_in_order_with_the_attributes_the_exporter_writes():
    model = EvolvingChain().eval()
    recording = Recording()
    with torch.no_grad(), recording_op_calls(recording):
        model(**example_inputs())
    assert [call.spec.name for call in recording.calls] == [
        "EvolvingAttentionStart", "EvolvingAttention", "EvolvingAttention"]
    second = recording.calls[1]
    assert [a.shape for a in second.inputs[:3]] == [(2, 2, 6, 8)] * 3  # [B, H, T, d]
    assert [o.shape for o in second.outputs] == [(2, 2, 6, 8), (2, 2, 6, 6)]
    assert second.resolved_attributes() == pytest.approx(
        {"scale": 8 ** -0.5, "alpha": 0.3, "beta": 0.5, "negative_slope": 0.01})


def test_the_functional_references_are_given_back_even_when_the_forward_fails():
    originals = functional.evolving_attention, functional.evolving_attention_start
    with pytest.raises(RuntimeError, match="boom"), recording_op_calls(Recording()):
        assert functional.evolving_attention is not originals[0]
        raise RuntimeError("boom")
    assert (functional.evolving_attention, functional.evolving_attention_start) == originals


def test_a_hooked_module_keeps_each_calls_output_tensors_and_the_hook_goes_away():
    model = EvolvingChain().eval()
    recording = Recording()
    with torch.no_grad(), recording_modules(model, ["layers.1", "missing"], recording):
        model(**example_inputs())
    (call,) = recording.outputs["layers.1"]
    assert [t.shape for t in call] == [(2, 6, 16), (2, 2, 6, 6)]  # (y, logits)
    (taken,) = recording.inputs["layers.1"]
    assert [t.shape for t in taken] == [(2, 6, 16), (2, 6), (2, 2, 6, 6)]  # x, mask, logits
    assert not model.layers[1]._forward_hooks
