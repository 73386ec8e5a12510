"""Per-row activation scales for a dynamically quantized model (`quantize --activations per-row`).

onnxruntime's dynamic quantization writes, for each MatMul with a weight,
`DynamicQuantizeLinear(x) -> MatMulInteger -> Cast -> Mul(x_scale * w_scale)`: one scale and zero
point over the whole activation tensor, so a text's answer depends on the texts batched with it
(on the MiniLMs, 6-12 of 827 held-out labels changed between a text alone and in a batch of 8;
benchmarks/README.md, `int8_batching.py`). `per_row_activations` replaces each
DynamicQuantizeLinear by the same quantization over the last axis, one scale and zero point per
token:

    lo, hi = min(min_k x, 0), max(max_k x, 0)           [..., 1]
    s      = max((hi - lo) / 255, tiny)                  [..., 1]
    zp     = clip(round(-lo / s), 0, 255)                [..., 1]
    x_q    = uint8(clip(round(x / s) + zp, 0, 255))      [..., K]

The last line is one QuantizeLinear with a scale and zero point per row (`axis=0`) on the 2-D
view [R, K] of x, R = the product of the leading dims. MatMulInteger then takes zero point 0,
and the rows' zero points are folded out after it:
`Y = (x_q W_q - zp * colsum(W_q - w_zp)) * s * w_scale` ([..., N]). Every op is standard ONNX
(ReduceMin/ReduceMax take their axes as the model's opset wants; per-axis QuantizeLinear is
opset 13), so Triton's onnxruntime runs it; each answer is then the same alone or in any batch,
and the finer scales kept more labels. The ops onnxruntime fuses into one kernel for per-tensor
scales run one by one here, which costs time (benchmarks/README.md, `int8_batching.py`).

Two shorter forms were tried and are not used. MatMulInteger could take the rows' zero points
itself (the standard allows a vector), but onnxruntime's kernel accepts a scalar only. A fixed
zero point of 128 (symmetric scales) needs no fold, but kept fewer labels (99.27 % of the
standard MiniLM's against 99.76 %). It also showed a trap: onnxruntime fuses
`MatMulInteger -> Cast -> Mul(Mul(scale, w_scale))` into MatMulIntegerToFloat, and that kernel
does not apply per-row scales as the unfused ops do: the fused model's logits were 1.64 from
fp32's, the same graph unfused 0.28. The Sub of the fold stands between the Cast and the Mul,
so that fusion cannot apply here (tests/quantize/test_per_row.py runs with every optimization).
"""

from __future__ import annotations

import collections
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from attndeploy.errors import QuantizeError
from attndeploy.interface import default_opset

PREFIX = "attndeploy_per_row_"  # names of the constants and nodes this adds


def per_row_activations(model: onnx.ModelProto) -> int:
    """Rewrite `model` (onnxruntime's dynamic int8) in place to per-row activation scales;
    return how many DynamicQuantizeLinear nodes were replaced."""
    graph = model.graph
    weights = {t.name: t for t in graph.initializer}
    users: dict[str, list[onnx.NodeProto]] = collections.defaultdict(list)
    for node in graph.node:
        for name in node.input:
            users[name].append(node)
    constants = {f"{PREFIX}axes": np.array([-1], np.int64),
                 f"{PREFIX}flat": np.array([-1], np.int64),
                 f"{PREFIX}zero": np.array(0.0, np.float32),
                 f"{PREFIX}255": np.array(255.0, np.float32),
                 f"{PREFIX}tiny": np.array(np.finfo(np.float32).tiny, np.float32),
                 f"{PREFIX}zero_point": np.array(0, np.uint8)}
    opset = default_opset(model) or 0
    instead: dict[str, list[onnx.NodeProto]] = {}  # a DynamicQuantizeLinear -> its replacement
    after: dict[str, list[onnx.NodeProto]] = {}  # a Cast -> the zero-point fold after it
    for node in graph.node:
        if node.op_type != "DynamicQuantizeLinear":
            continue
        for matmul in users[node.output[0]]:
            if matmul.op_type != "MatMulInteger" or matmul.input[1] not in weights:
                raise QuantizeError(f"{node.name} feeds {matmul.op_type} {matmul.name}, not a "
                                    "MatMulInteger with a weight: per-row activations cannot "
                                    "rewrite this graph")
        rows_shape = f"{PREFIX}{node.name}_rows_shape"
        constants[rows_shape] = np.array([-1, _depth(node, users, weights)], np.int64)
        instead[node.name], zero_point = _quantize_rows(node, opset, rows_shape)  # [..., 1]
        for matmul in users[node.output[0]]:
            colsum = f"{PREFIX}{matmul.name}_colsum"
            constants[colsum] = _column_sums(matmul, weights)  # [N]
            matmul.input[2] = f"{PREFIX}zero_point"
            casts = users[matmul.output[0]]
            if [user.op_type for user in casts] != ["Cast"]:
                raise QuantizeError(f"{matmul.name}'s output does not go to one Cast: per-row "
                                    "activations cannot rewrite this graph")
            (cast,) = casts
            folded = f"{PREFIX}{cast.output[0]}"
            for user in users[cast.output[0]]:
                user.input[:] = [folded if name == cast.output[0] else name
                                 for name in user.input]
            after[cast.name] = [
                helper.make_node("Mul", [zero_point, colsum], [f"{folded}_zp"]),  # [..., N]
                helper.make_node("Sub", [cast.output[0], f"{folded}_zp"], [folded]),  # [..., N]
            ]
    nodes = []
    for node in graph.node:
        nodes.extend(instead.get(node.name, [node]))
        nodes.extend(after.get(node.name, []))
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(numpy_helper.from_array(value, name)
                             for name, value in constants.items())
    return len(instead)


def _depth(node: onnx.NodeProto, users: dict[str, list[onnx.NodeProto]],
           weights: dict[str, onnx.TensorProto]) -> int:
    """K, the last dim of the DynamicQuantizeLinear's input: the rows of the 2-D weights
    ([K, N]) of the MatMulIntegers it feeds, which must agree."""
    depths = {tuple(weights[matmul.input[1]].dims) for matmul in users[node.output[0]]}
    if len({dims[0] for dims in depths}) != 1 or any(len(dims) != 2 for dims in depths):
        raise QuantizeError(f"{node.name} feeds MatMulIntegers whose weights are not 2-D with "
                            f"one depth ({sorted(depths)}): per-row activations cannot rewrite "
                            "this graph")
    return next(iter(depths))[0]


def _quantize_rows(node: onnx.NodeProto, opset: int, rows_shape: str
                   ) -> tuple[list[onnx.NodeProto], str]:
    """DynamicQuantizeLinear's arithmetic over the last axis: the nodes that make its quantized
    input and scale per row, and the name of the rows' zero points (float, [..., 1]), which
    replace its uint8 zero-point output. `rows_shape`: the constant [-1, K]."""
    x, (quantized, scale, _) = node.input[0], node.output
    p = f"{PREFIX}{node.name}"
    c = PREFIX

    def op(kind: str, inputs: list[str], out: str, **attrs: Any) -> onnx.NodeProto:
        return helper.make_node(kind, inputs, [out], name=f"{out}_node", **attrs)

    def reduce(kind: str, out: str) -> onnx.NodeProto:  # axes: an input from opset 18 on
        if opset >= 18:
            return op(kind, [x, f"{c}axes"], out, keepdims=1)
        return op(kind, [x], out, axes=[-1], keepdims=1)

    return [
        reduce("ReduceMin", f"{p}_min"),  # [..., 1]
        reduce("ReduceMax", f"{p}_max"),  # [..., 1]
        op("Min", [f"{p}_min", f"{c}zero"], f"{p}_lo"),  # the range holds 0, as in the op
        op("Max", [f"{p}_max", f"{c}zero"], f"{p}_hi"),
        op("Sub", [f"{p}_hi", f"{p}_lo"], f"{p}_range"),
        op("Div", [f"{p}_range", f"{c}255"], f"{p}_s"),
        op("Max", [f"{p}_s", f"{c}tiny"], scale),  # [..., 1]; a row of zeros keeps a scale
        op("Div", [f"{p}_lo", scale], f"{p}_lo_s"),
        op("Neg", [f"{p}_lo_s"], f"{p}_zp_raw"),
        op("Round", [f"{p}_zp_raw"], f"{p}_zp_round"),
        op("Clip", [f"{p}_zp_round", f"{c}zero", f"{c}255"], f"{p}_zp"),  # [..., 1]
        op("Cast", [f"{p}_zp"], f"{p}_zp_u8", to=TensorProto.UINT8),  # [..., 1]
        op("Reshape", [f"{p}_zp_u8", f"{c}flat"], f"{p}_zp_rows"),  # [..., 1] -> [R]
        op("Reshape", [scale, f"{c}flat"], f"{p}_s_rows"),  # [..., 1] -> [R]
        op("Reshape", [x, rows_shape], f"{p}_x_rows"),  # [..., K] -> [R, K]
        op("QuantizeLinear", [f"{p}_x_rows", f"{p}_s_rows", f"{p}_zp_rows"], f"{p}_q_rows",
           axis=0),  # [R, K] uint8: round half to even, saturate, one scale per row
        op("Shape", [x], f"{p}_shape"),
        op("Reshape", [f"{p}_q_rows", f"{p}_shape"], quantized),  # [R, K] -> [..., K]
    ], f"{p}_zp"


def _column_sums(matmul: onnx.NodeProto, weights: dict[str, onnx.TensorProto]) -> np.ndarray:
    """Σ_k (W_q - w_zp)[k, n] of the MatMulInteger's weight, as float ([N])."""
    w = numpy_helper.to_array(weights[matmul.input[1]]).astype(np.int64)  # [K, N]
    zero_point = (numpy_helper.to_array(weights[matmul.input[3]]).astype(np.int64)
                  if len(matmul.input) > 3 and matmul.input[3] else 0)
    return (w - zero_point).sum(axis=0).astype(np.float32)  # [N]
