"""`attndeploy.debug.graph`: the attention nodes, module scopes and blocks of an exported graph."""

from __future__ import annotations

import onnx
import pytest

from attndeploy.debug.graph import GraphLayers, _block_of, registered_attention
from tests.debug.conftest import LAYERS

EVOLVING_LAYER = "attndeploy.variants.evolving.layer.EvolvingAttention"


@pytest.mark.parametrize(("attention", "block"), [
    ("blocks.2.attention", "blocks.2"),
    ("bert.encoder.layer.11.attention.self", "bert.encoder.layer.11"),
    ("evolving.0", "evolving.0"),  # a ModuleList of attention layers: the layer is the block
    ("gated", "gated"),  # no indexed ancestor: the layer itself
])
def test_a_block_is_the_outermost_indexed_module_around_an_attention_layer(attention, block):
    assert _block_of(attention) == block


def test_the_exporters_wrappers_are_stepped_over_to_the_models_own_module_names(models):
    graph = GraphLayers(onnx.load(str(models.get("evolving").path)))
    assert graph.scoped and graph.root == "model.model"  # _FlatModel, then _InterfaceWrapper
    assert [(c.op_type, c.scope) for c in graph.custom_nodes] == [
        ("EvolvingAttentionStart", "blocks.0.attention"),
        ("EvolvingAttention", "blocks.1.attention"),
        ("EvolvingAttention", "blocks.2.attention")]
    assert graph.root_for(["blocks.0.attention", "blocks.1"]) == "model.model"


def test_a_block_leaves_its_residual_stream_and_the_logits_its_attention_hands_on(models):
    graph = GraphLayers(onnx.load(str(models.get("evolving").path)))
    blocks = graph.blocks(registered_attention([EVOLVING_LAYER]))
    assert [(b.scope, b.class_name) for b in blocks] == [
        (f"blocks.{k}", "EncoderBlock") for k in range(LAYERS)]
    handed_on = [c.node.output[1] for c in graph.custom_nodes]  # each layer's `logits`
    for block, logits in zip(blocks[:-1], handed_on, strict=False):
        assert len(block.values) == 2 and logits in block.values
    assert len(blocks[-1].values) == 1  # the last layer's logits go nowhere
    assert [b.position for b in blocks] == sorted(b.position for b in blocks)
    assert all(name in {n.name for n in graph.nodes} for b in blocks for name in b.nodes)


def test_a_graph_without_module_scopes_has_no_blocks(models):
    model = onnx.load(str(models.get("evolving").path))
    for node in model.graph.node:
        del node.metadata_props[:]
    graph = GraphLayers(model)
    assert not graph.scoped and graph.root == ""
    assert graph.blocks(lambda path, cls: True) == []
    assert [c.scope for c in graph.custom_nodes] == [None] * LAYERS


def test_the_matmuls_of_a_module_class_are_found_by_its_scopes(models):
    model = onnx.load(str(models.get("ganet_mlp").path))
    gate_network = GraphLayers(model).matmuls_in_classes(["GateController"])
    kinds = {n.name: n.op_type for n in model.graph.node}
    assert len(gate_network) == 2 and {kinds[name] for name in gate_network} == {"MatMul"}
    evolving = onnx.load(str(models.get("evolving").path))
    assert GraphLayers(evolving).matmuls_in_classes(["GateController"]) == ()  # none there
    for node in model.graph.node:
        del node.metadata_props[:]
    assert GraphLayers(model).matmuls_in_classes(["GateController"]) == ()  # no scopes
