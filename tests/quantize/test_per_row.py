"""`per_row_activations`: onnxruntime's dynamic int8 rewritten to one activation scale and zero
point per row, checked against a NumPy oracle of that arithmetic at both ReduceMin/ReduceMax
signatures (axes as an attribute before opset 18, as an input from it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from attndeploy.errors import QuantizeError
from attndeploy.quantize.per_row import per_row_activations

K, N = 16, 8  # the MatMul's depth and width


def dynamic_int8(tmp_path: Path, opset: int) -> onnx.ModelProto:
    """x [B, T, K] -> MatMul W [K, N] -> Add b -> y, through onnxruntime's dynamic int8 (one
    weight scale per output channel, as `attndeploy quantize` runs it)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(0)
    weight = rng.normal(size=(K, N)).astype(np.float32)
    bias = rng.normal(size=N).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
         helper.make_node("Add", ["h", "b"], ["y"], name="add")],
        "one_matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "T", K])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "T", N])],
        [numpy_helper.from_array(weight, "W"), numpy_helper.from_array(bias, "b")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]),
              tmp_path / "fp32.onnx")
    quantize_dynamic(tmp_path / "fp32.onnx", tmp_path / "int8.onnx",
                     weight_type=QuantType.QInt8, per_channel=True)
    return onnx.load(tmp_path / "int8.onnx")


def per_row_oracle(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """y = ((x_q - zp) (W_q - w_zp)) * s * w_scale + b with s, zp from each row's own range
    ([B, T, K] -> [B, T, N])."""
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    lo = np.minimum(x.min(axis=-1, keepdims=True), 0)  # [B, T, 1]
    hi = np.maximum(x.max(axis=-1, keepdims=True), 0)
    scale = np.maximum((hi - lo) / np.float32(255), np.finfo(np.float32).tiny)  # [B, T, 1]
    zero_point = np.clip(np.rint(-lo / scale), 0, 255)  # [B, T, 1]
    x_q = np.clip(np.rint(x / scale) + zero_point, 0, 255)  # [B, T, K]
    w = weights["W_quantized"].astype(np.float64) - weights["W_zero_point"]  # [K, N]
    return ((x_q - zero_point) @ w * scale * weights["W_scale"] + weights["b"]).astype(
        np.float32)  # [B, T, N]


def rows() -> np.ndarray:
    """Rows of very different ranges: wide, narrow, all zero, all positive, all negative."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 5, K)).astype(np.float32)  # [B, T, K]
    x[0, 1] *= 100.0
    x[0, 2] *= 0.01
    x[1, 0] = 0.0
    x[1, 1] = np.abs(x[1, 1]) + 1.0
    x[1, 2] = -np.abs(x[1, 2]) - 1.0
    return x


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


@pytest.mark.parametrize("opset", [17, 18])
def test_each_row_is_quantized_with_its_own_range_as_the_oracle_computes(tmp_path, opset):
    model = dynamic_int8(tmp_path, opset)
    x = rows()
    oracle = per_row_oracle(model, x)
    per_batch = run(model, x)
    assert np.abs(per_batch - oracle).max() > 1e-2  # one scale for all rows is not this
    assert per_row_activations(model) == 1
    assert not any(node.op_type == "DynamicQuantizeLinear" for node in model.graph.node)
    np.testing.assert_allclose(run(model, x), oracle, rtol=1e-5, atol=1e-5)
    alone = np.concatenate([run(model, x[i:i + 1]) for i in range(len(x))])  # [B, T, N]
    np.testing.assert_array_equal(alone, run(model, x))


def test_a_quantized_input_that_feeds_no_weight_is_refused(tmp_path):
    model = dynamic_int8(tmp_path, 17)
    matmul = next(node for node in model.graph.node if node.op_type == "MatMulInteger")
    model.graph.input.append(helper.make_tensor_value_info("other", TensorProto.INT8, [K, N]))
    matmul.input[1] = "other"  # a second activation, not a weight
    with pytest.raises(QuantizeError, match="not a MatMulInteger with a weight"):
        per_row_activations(model)
