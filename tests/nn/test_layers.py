"""The public layers of `attndeploy.nn`: plain arguments, batch-first tensors, the variant maths
of `attndeploy.variants.functional` (one implementation, shared with the built-in models)."""

from __future__ import annotations

import pytest
import torch

import attndeploy.nn as adnn
from attndeploy.errors import ConfigError
from attndeploy.models import build_model
from attndeploy.variants import functional as Fn
from attndeploy.variants.api import merge_heads, split_heads
from tests.cases import CASES_BY_ID
from tests.helpers import assert_close, lengths_mask, randn, vanilla_attention

pytestmark = pytest.mark.usefixtures("torch_defaults")

D, H = 16, 2


def heads_of(layer, x):
    q, k, v = (split_heads(t, H) for t in layer.qkv(x).chunk(3, dim=-1))  # [B, H, T, d]
    return q, k, v


@pytest.mark.parametrize("form", ["pooled", "pairwise"])
def test_qvi_layer_is_the_functional_op_between_its_projections(form):
    layer = adnn.QVIAttention(D, H, form=form)
    x, mask = randn(2, 5, D, seed=1), lengths_mask([5, 2], 5)
    q, k, v = heads_of(layer, x)
    weights = [layer.q_map_weight, layer.q_map_bias, layer.v_map_weight, layer.v_map_bias,
               layer.gate_v_weight, layer.gate_qv_weight, layer.gate_bias]
    if form == "pooled":
        heads = Fn.qvi_attention(q, k, v, mask, *weights, layer.pool_weight)
    else:
        heads = Fn.qvi_pairwise_attention(q, k, v, mask, *weights)
    assert_close(layer(x, mask), layer.out(merge_heads(heads)))


def test_an_integer_attention_mask_and_no_mask_are_accepted():
    layer = adnn.QVIAttention(D, H)
    x = randn(2, 4, D, seed=2)
    int_mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    assert torch.equal(layer(x, int_mask), layer(x, int_mask.bool()))
    assert torch.equal(layer(x), layer(x, torch.ones(2, 4, dtype=torch.bool)))


def test_bad_arguments_fail_saying_what_to_change():
    with pytest.raises(ConfigError, match="multiple of num_heads"):
        adnn.QVIAttention(10, 3)
    with pytest.raises(ConfigError, match="qvi form"):
        adnn.QVIAttention(D, H, form="dense")
    with pytest.raises(ConfigError, match="alpha"):
        adnn.EvolvingAttention(D, H, alpha=2.0)
    with pytest.raises(ConfigError, match="aux network"):
        adnn.GateNetwork(D, kind="transformer")
    with pytest.raises(ConfigError, match="does not match"):
        adnn.QVIAttention(D, H)(randn(2, 4, D), torch.ones(2, 5, dtype=torch.bool))


def test_bias_false_drops_the_projection_biases():
    names = {name for name, _ in adnn.GatedAttention(D, H, bias=False).named_parameters()}
    assert names == {"qkv.weight", "out.weight"}


def test_gated_layer_in_eval_uses_the_hard_gates_of_the_logits():
    layer = adnn.GatedAttention(D, H).eval()
    x, mask = randn(3, 6, D, seed=3), lengths_mask([6, 4, 1], 6)
    logits = randn(3, 6, seed=4)
    y, gates = layer(x, mask, logits)
    assert torch.equal(gates, Fn.hard_gates(logits, mask))
    q, k, v = heads_of(layer, x)
    expected = layer.out(merge_heads(vanilla_attention(q, k, v, gates)))
    assert_close(y[mask], expected[mask])


@pytest.mark.parametrize("straight_through", [False, True])
def test_gated_layer_in_training_sends_gradients_to_the_gate_logits(straight_through):
    layer = adnn.GatedAttention(D, H, straight_through=straight_through).train()
    x, mask = randn(2, 5, D, seed=5), lengths_mask([5, 3], 5)
    logits = randn(2, 5, seed=6).requires_grad_()
    y, gates = layer(x, mask, logits)
    assert torch.equal(gates, Fn.hard_gates(logits.detach(), mask))
    (y * randn(*y.shape, seed=7)).sum().backward()
    assert logits.grad is not None and logits.grad[mask].abs().sum() > 0


def test_gate_network_samples_in_training_only():
    network = adnn.GateNetwork(D, hidden=8)
    x, mask = randn(2, 5, D, seed=8), lengths_mask([5, 3], 5)
    network.eval()
    assert torch.equal(network(x, mask), network.scores(x, mask))
    network.train()
    torch.manual_seed(0)
    noisy = network(x, mask)
    assert not torch.equal(noisy, network.scores(x, mask))
    network.sample_in_training = False
    assert torch.equal(network(x, mask), network.scores(x, mask))


def test_evolving_layer_starts_a_chain_without_previous_logits():
    layer = adnn.EvolvingAttention(D, H, alpha=0.3, beta=0.5)
    start = adnn.EvolvingAttention(D, H, chain_start=True)
    start.load_state_dict(layer.state_dict(), strict=False)
    x, mask = randn(2, 5, D, seed=9), lengths_mask([5, 2], 5)
    y, logits = layer(x, mask)
    y_start, logits_start = start(x, mask)
    assert_close(y[mask], y_start[mask])
    assert torch.equal(logits, logits_start)
    y2, logits2 = layer(y, mask, logits)  # continues the chain through the conv
    q, k, v = heads_of(layer, y)
    ref_heads, ref_logits = Fn.evolving_attention(
        q, k, v, mask, logits, layer.conv.weight, layer.conv.bias, alpha=0.3, beta=0.5
    )
    assert_close(logits2, ref_logits)
    assert_close(y2, layer.out(merge_heads(ref_heads)))
    assert not hasattr(start, "conv")
    with pytest.raises(ConfigError, match="chain_start=True"):
        start(x, mask, logits)


@pytest.mark.parametrize("case_id, cls", [
    ("standard", adnn.StandardAttention), ("qvi_pooled", adnn.QVIAttention),
    ("ganet_mlp", adnn.GatedAttention), ("evolving", adnn.EvolvingAttention),
])
def test_the_built_in_transformer_is_built_on_these_layers(case_id, cls):
    model = build_model(CASES_BY_ID[case_id].config())
    assert all(type(block.attention) is cls for block in model.blocks)
    if case_id == "ganet_mlp":
        assert isinstance(model.gates.network, adnn.GateNetwork)
