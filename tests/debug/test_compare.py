"""`attndeploy.debug.compare`: layer-by-layer comparison of an export with PyTorch and of two ONNX
files, on tiny checkpoints of every variant (tests/cases.py), fp32, fp16 and int8."""

from __future__ import annotations

import logging

import numpy as np
import onnx
import pytest
import torch

from attndeploy.debug import (
    DebugOptions,
    compare_checkpoint,
    compare_models,
    compare_module,
    metadata_feeds,
)
from attndeploy.debug.sources import load_onnx
from attndeploy.errors import ValidationError
from tests.debug.conftest import LAYERS, PLANTED_SCALE, plant_in_attribute, plant_in_body

pytestmark = pytest.mark.usefixtures("torch_defaults")

PLANTED_LAYER = 1  # the first EvolvingAttention: the second one shares its function


def _feeds(path):
    _, metadata = load_onnx(path)
    return metadata_feeds(metadata)


def _quantized(source, target):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    logging.getLogger().setLevel(logging.ERROR)  # "consider pre-processing" is not our concern
    quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8)
    return target


# ----------------------------------------------------------------------------- planted bugs


def test_a_scale_planted_in_one_layers_function_names_that_layer_and_the_body_node(models,
                                                                                   tmp_path):
    clean = models.get("evolving")
    edited = plant_in_body(clean.path, tmp_path / "planted.onnx", PLANTED_LAYER)
    report = compare_checkpoint(clean.checkpoint, tmp_path / "planted.onnx")
    first = report.first_divergence
    assert (first.kind, first.index, first.op_type) == ("node", PLANTED_LAYER,
                                                         "EvolvingAttention")
    assert all(layer.passed for layer in report.layers[:report.layers.index(first)])
    step = report.inside.first_body_node
    assert (step.name, step.op_type) == (edited, "Constant")
    assert report.inside.function == "attndeploy::EvolvingAttention@planted"
    assert report.verdict.startswith(
        f"first divergence: layer {PLANTED_LAYER} (EvolvingAttention), inside its function at "
        f"node `{edited}` (Constant), error ")
    assert report.verdict.endswith("against the tolerance 1e-5")
    # the other EvolvingAttention layer shares the original function: its own computation is
    # right, so at its own inputs the function agrees with variants.functional
    assert all(c.passed for c in report.inside.inputs.values())
    assert not all(c.passed for c in report.inside.functional.values())


def test_the_same_model_without_the_bug_reports_no_divergence(models):
    clean = models.get("evolving")
    report = compare_checkpoint(clean.checkpoint, clean.path)
    assert report.passed and report.first_divergence is None and report.inside is None
    assert report.verdict.startswith("no divergence: every layer agrees within atol 1e-5")
    assert [layer.label for layer in report.of_kind("node")] == [
        f"layer {k}" for k in range(LAYERS)]
    assert [layer.scope for layer in report.of_kind("block")] == [
        f"blocks.{k}" for k in range(LAYERS)]


def test_a_scale_attribute_changed_on_one_node_is_named_as_that_attribute(models, tmp_path):
    clean = models.get("evolving")
    plant_in_attribute(clean.path, tmp_path / "attribute.onnx", PLANTED_LAYER)
    report = compare_checkpoint(clean.checkpoint, tmp_path / "attribute.onnx")
    assert report.first_divergence.index == PLANTED_LAYER
    assert report.inside.first_body_node is None  # the body itself is the op set's
    assert report.inside.attributes["scale"]["equal"] is False
    assert report.inside.attributes["scale"]["node"] == pytest.approx(PLANTED_SCALE)
    assert "its attribute `scale` is 0.9 where the reference has 0.353553" in report.verdict


def test_a_planted_bug_is_found_against_the_clean_onnx_model_without_pytorch(models, tmp_path):
    clean = models.get("evolving")
    edited = plant_in_body(clean.path, tmp_path / "planted.onnx", PLANTED_LAYER)
    feeds, labels = _feeds(clean.path)
    report = compare_models(clean.path, tmp_path / "planted.onnx", feeds, feed_labels=labels)
    assert report.reference == str(clean.path)
    assert (report.first_divergence.kind, report.first_divergence.index) == ("node",
                                                                             PLANTED_LAYER)
    assert report.inside.first_body_node.name == edited
    assert report.ranked()[0].label in (f"layer {PLANTED_LAYER}", f"block blocks.{PLANTED_LAYER}")


# ----------------------------------------------------------------------------- every variant


@pytest.mark.parametrize("case_id", ["standard", "qvi_pooled", "qvi_pairwise", "ganet_mlp",
                                     "ganet_gather", "evolving_leaky"])
def test_every_variant_agrees_with_pytorch_layer_by_layer(models, case_id):
    exported = models.get(case_id)
    report = compare_checkpoint(exported.checkpoint, exported.path, shapes="4x16,1x1,3x9")
    assert report.passed, report.verdict
    assert len(report.of_kind("block")) == LAYERS
    assert all(layer.values for layer in report.layers)
    assert report.shapes == ["4x16", "1x1", "3x9"]
    if case_id == "standard":  # no attndeploy node: its layers are its blocks
        assert report.of_kind("node") == []
    else:
        assert report.of_kind("node")


def test_ganet_reports_gate_agreement_of_every_gated_node(models):
    exported = models.get("ganet_mlp")
    report = compare_checkpoint(exported.checkpoint, exported.path)
    nodes = report.of_kind("node")
    assert [n.op_type for n in nodes] == ["GatedAttention"] * LAYERS + ["GatedAttentionPooling"]
    for node in nodes:
        assert node.gates == {"flips": 0, "accepted_flips": 0, "margin": node.gates["margin"]}
        assert node.values["gates"].kind == "gates"
    assert report.of_kind("output")[0].gates is not None


def test_an_fp16_export_agrees_within_fp16_tolerances(models):
    exported = models.get("evolving", fp16=True)
    report = compare_checkpoint(exported.checkpoint, exported.path)
    assert report.passed, report.verdict
    assert (report.tolerance.atol, report.tolerance.rtol) == (1e-2, 1e-2)
    assert len(report.of_kind("block")) == LAYERS
    assert max(layer.max_abs for layer in report.layers) > 1e-5  # it is fp16 arithmetic


def test_fp16_against_fp32_compares_the_same_layers_without_pytorch(models):
    fp32, fp16 = models.get("evolving"), models.get("evolving", fp16=True)
    feeds, labels = _feeds(fp32.path)
    report = compare_models(fp32.path, fp16.path, feeds, feed_labels=labels)
    assert report.passed, report.verdict
    assert [layer.label for layer in report.layers] == [
        "layer 0", "block blocks.0", "layer 1", "block blocks.1", "layer 2", "block blocks.2",
        "output logits"]


def test_int8_against_fp32_ranks_the_layers_by_the_error_they_add(models, tmp_path):
    fp32 = models.get("evolving")
    int8 = _quantized(fp32.path, tmp_path / "int8.onnx")
    feeds, labels = _feeds(fp32.path)
    report = compare_models(fp32.path, int8, feeds, feed_labels=labels)
    assert not report.passed
    ranked = report.ranked()
    assert {layer.kind for layer in ranked} == {"node", "block"}
    added = [layer.added_error for layer in ranked]
    assert added == sorted(added, reverse=True) and added[0] > 1e-3
    # a block names the reference's nodes, e.g. the MatMuls a quantizer may exclude
    reference_nodes = {n.name for n in onnx.load(str(fp32.path)).graph.node}  # what the
    # quantizer's exclusion list names
    block = report.of_kind("block")[0]
    assert set(block.nodes) <= reference_nodes
    assert block.matmuls and set(block.matmuls) <= set(block.nodes)
    ops = {n.name: n.op_type for n in onnx.load(str(fp32.path)).graph.node}
    assert {ops[name] for name in block.matmuls} <= {"MatMul", "Gemm"}
    # the attention functions are kept as they are: the divergence enters through the inputs
    assert "already differs" in report.inside.finding()
    assert report.inside.first_body_node is None


def test_a_user_model_is_compared_node_by_node_and_by_its_attention_layers(tmp_path):
    from attndeploy.export import export_model
    from tests.nn.toy_models import DYNAMIC, GatedTagger, example_inputs

    torch.manual_seed(0)
    model = GatedTagger("mlp")
    path = tmp_path / "tagger.onnx"
    export_model(model, path, inputs=example_inputs(), dynamic_shapes=DYNAMIC)
    report = compare_module(model, path, [example_inputs(batch=3, seq=7)])
    assert report.passed, report.verdict
    assert [layer.label for layer in report.of_kind("node")] == ["layer 0", "layer 1"]
    assert [layer.scope for layer in report.of_kind("block")] == ["layers.0", "layers.1"]
    assert report.of_kind("block")[-1].gates is not None  # its gates are the model's gates
    assert model.training  # the module's mode is given back


# ----------------------------------------------------------------------------- refusals


def test_two_exports_of_different_checkpoints_are_not_the_same_model(models):
    evolving, qvi = models.get("evolving"), models.get("qvi_pooled")
    feeds, _ = _feeds(evolving.path)
    with pytest.raises(ValidationError, match="are not the same model: they have attndeploy "
                                              "nodes"):
        compare_models(evolving.path, qvi.path, feeds)


def test_an_onnx_file_attndeploy_did_not_export_is_refused(tmp_path, models):
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Identity", ["x"], ["y"])], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])])
    onnx.save(onnx.helper.make_model(graph), str(tmp_path / "plain.onnx"))
    evolving = models.get("evolving")
    with pytest.raises(ValidationError, match="was not made by attndeploy export"):
        compare_models(evolving.path, tmp_path / "plain.onnx", [{"x": np.ones(1, np.float32)}])


def test_a_model_whose_op_calls_are_not_the_exports_nodes_is_refused(models):
    from tests.nn.toy_models import QVIClassifier, example_inputs

    evolving = models.get("evolving")
    feed = {k: v.numpy() for k, v in example_inputs().items()}
    with pytest.raises(ValidationError, match="does not hold this model's attention ops: the "
                                              "model calls QVIAttention, the graph has"):
        compare_module(QVIClassifier(), evolving.path, [feed])


def test_shapes_beyond_the_models_max_seq_are_refused_before_any_work(models):
    exported = models.get("evolving")
    with pytest.raises(ValidationError, match="exceed the maximum sequence length 16"):
        compare_checkpoint(exported.checkpoint, exported.path, shapes="2x40")


def test_negative_tolerances_are_refused():
    with pytest.raises(ValidationError, match="atol must be >= 0"):
        DebugOptions(atol=-1.0)


def test_config_metadata_nested_too_deep_is_one_validation_error() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(ValidationError, match="nests JSON more than 64 levels deep"):
        metadata_feeds({"config": deep})
