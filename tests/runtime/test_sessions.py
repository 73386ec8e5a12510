"""`create_session`: every in-process session leaves out the fusions that are slower on CPU
(SkipLayerNormalization), unless told to run every fusion as the server does; the numbers
stay those of the unfused graph."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from attndeploy.runtime.sessions import SLOWER_FUSIONS, create_session

WIDTH = 8


def _residual_layer_norm() -> onnx.ModelProto:
    """y = LayerNorm(x + h): the pattern onnxruntime fuses into SkipLayerNormalization."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Add", ["x", "h"], ["s"]),
             helper.make_node("LayerNormalization", ["s", "gamma", "beta"], ["y"], axis=-1,
                              epsilon=1e-5)]
    inputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["B", "T", WIDTH])
              for name in ("x", "h")]
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "T", WIDTH])
    weights = [numpy_helper.from_array(rng.normal(size=WIDTH).astype(np.float32), name)
               for name in ("gamma", "beta")]
    graph = helper.make_graph(nodes, "residual_ln", inputs, [output], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _fused_ops(tmp_path, **kwargs) -> list[str]:
    path = tmp_path / "optimized.onnx"
    create_session(_residual_layer_norm(), optimized_model_path=path, **kwargs)
    return [node.op_type for node in onnx.load(str(path)).graph.node]


def test_skip_layer_norm_is_left_out_unless_every_fusion_is_asked_for(tmp_path):
    assert "SkipLayerNormFusion" in SLOWER_FUSIONS
    assert "SkipLayerNormalization" not in _fused_ops(tmp_path)
    assert "SkipLayerNormalization" in _fused_ops(tmp_path, disabled_fusions=())


def test_both_sessions_give_the_same_numbers():
    rng = np.random.default_rng(1)
    feed = {name: rng.normal(size=(2, 3, WIDTH)).astype(np.float32) for name in ("x", "h")}
    ours = create_session(_residual_layer_norm()).run(None, feed)[0]
    every = create_session(_residual_layer_norm(), disabled_fusions=()).run(None, feed)[0]
    np.testing.assert_allclose(ours, every, atol=1e-5, rtol=0)
