"""`attndeploy.debug.inside`: a node's function run alone, node by node, against the op set's
body; an edited op of the body is named."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from attndeploy.debug import compare_checkpoint
from attndeploy.debug.inside import body_model
from attndeploy.variants.op_registry import op_spec
from tests.debug.conftest import custom_nodes

pytestmark = pytest.mark.usefixtures("torch_defaults")


def test_a_function_inlined_alone_keeps_one_node_per_body_node_and_exposes_each_output():
    function = op_spec("EvolvingAttention").function_proto(18)
    node = onnx.helper.make_node("EvolvingAttention", list(function.input),
                                 list(function.output), domain="attndeploy", scale=0.5,
                                 alpha=0.5, beta=1.0, negative_slope=0.0)
    inputs = [np.zeros((1, 2, 3, 4), np.float32)] * 3 + [np.ones((1, 3), bool)] + [
        np.zeros((1, 2, 3, 3), np.float32), np.zeros((2, 2, 3, 3), np.float32),
        np.zeros(2, np.float32)]
    model = body_model(node, function, 18, inputs, 10)
    assert [n.op_type for n in model.graph.node] == [n.op_type for n in function.node]
    outputs = {o.name for o in model.graph.output}
    assert all(name in outputs for n in model.graph.node for name in n.output if name)
    assert model.functions == [] and all(n.domain == "" for n in model.graph.node)


def test_an_op_swapped_in_one_layers_body_is_named_at_that_op(models, tmp_path):
    clean = models.get("evolving")
    model = onnx.load(str(clean.path))
    node = custom_nodes(model)[2]
    function = next(f for f in model.functions if f.name == node.op_type)
    planted = onnx.FunctionProto()
    planted.CopyFrom(function)
    planted.overload = "swapped"
    (scaled,) = [n for n in planted.node if list(n.output) == ["current"]]  # scale · Q Kᵀ
    scaled.op_type = "Div"
    model.functions.append(planted)
    node.overload = "swapped"
    onnx.save(model, str(tmp_path / "swapped.onnx"))
    report = compare_checkpoint(clean.checkpoint, tmp_path / "swapped.onnx")
    assert report.first_divergence.index == 2
    step = report.inside.first_body_node
    assert (step.name, step.op_type) == (scaled.name, "Div")
    assert all(s.passed for s in report.inside.body[:step.index])
