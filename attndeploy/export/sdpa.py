"""Scaled dot-product attention without the shape subgraph around Kᵀ.

torch.onnx's own translation (onnxscript's `aten_scaled_dot_product_attention`) swaps the last
two axes of the key through a subgraph that works for any rank: Shape, three Slices, two
Concats, Reshape to 3-D, Transpose, Reshape back (9 nodes a layer, two copies of K with the
heads' Transpose before it). At batch 1 their dispatch shows next to the layer's small GEMMs
(issue #55, benchmarks/ort_profile.py). For the 4-D inputs every attention layer gives, this
translation writes `MatMul(Mul(Q, scale), Transpose(K, perm=[0, 1, 3, 2]))`: torch.onnx's
optimizer merges that Transpose with the heads' one before it (one copy of K), and onnxruntime
folds the scalar Mul into FusedMatMul's alpha (MiniLM: 206 -> 146 nodes after onnxruntime's
optimizations, 5-7 % less CPU time at batch 1; benchmarks/README.md, `hf_references.py`).

torch.onnx multiplies Q and K by sqrt(scale) each (PyTorch's math kernel does, "for
stability"); one multiplication of Q by the scale has the same magnitudes at every step (the
partial sums of Q·Kᵀ are the same scaled values), so fp16 is as safe, and the results differ
by rounding only (MiniLM's hidden states: 3e-6 at most, within fp32's 1e-5 tolerance). The scale
is the constant torchlib's graph computes (`1 / sqrt(E)` in the query's dtype). From opset 23
on torch.onnx writes one `Attention` node, and this translation stands aside. Everything else
(a boolean mask, `is_causal`, dropout, grouped-query attention, a head size known only at run
time, other ranks) goes to torch.onnx's own translation unchanged.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnxscript import ir
from onnxscript import opset18 as op


def _own_translation(query: Any, key: Any, value: Any, attn_mask: Any, dropout_p: float,
                     is_causal: bool, scale: float | None, enable_gqa: bool) -> Any:
    from onnxscript.function_libs.torch_lib.ops.nn import (
        aten_scaled_dot_product_attention as torchlib_sdpa,
    )

    return torchlib_sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)


def _static_head_size(query: Any) -> int | None:
    shape = getattr(query, "shape", None)
    if shape is None or len(shape) != 4:
        return None
    size = shape[-1]
    return size if isinstance(size, int) else None


def attention_scale(head_size: int, scale: float | None, dtype: np.dtype) -> np.ndarray:
    """The scale as torchlib's graph computes it in `dtype`: 1 / sqrt(E) when None."""
    if scale is None:
        return np.asarray(dtype.type(1.0) / np.sqrt(dtype.type(head_size)), dtype=dtype)
    return np.asarray(scale, dtype=dtype)


def aten_scaled_dot_product_attention(
    query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0,
    is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False,
) -> Any:
    """aten::scaled_dot_product_attention, traced by torch.onnx (module docstring).

    query [B, H, Tq, E], key [B, H, Tk, E], value [B, H, Tk, Ev], attn_mask float, broadcast
    to [B, H, Tq, Tk] -> [B, H, Tq, Ev]."""
    head_size = _static_head_size(query)
    plain = (attn_mask is None or attn_mask.dtype != ir.DataType.BOOL)
    rank4 = all(getattr(t, "shape", None) is not None and len(t.shape) == 4 for t in (key, value))
    if (head_size is None or not rank4 or not plain or is_causal or dropout_p != 0.0
            or enable_gqa or query.dtype is None):
        return _own_translation(query, key, value, attn_mask, dropout_p, is_causal, scale,
                                enable_gqa)
    factor = ir.tensor(attention_scale(head_size, scale, query.dtype.numpy()))
    query_scaled = op.Mul(query, factor)  # [B, H, Tq, E]
    key_transposed = op.Transpose(key, perm=[0, 1, 3, 2])  # [B, H, E, Tk]
    scores = op.MatMul(query_scaled, key_transposed)  # [B, H, Tq, Tk]
    if attn_mask is not None:
        scores = op.Add(scores, attn_mask)
    return op.MatMul(op.Softmax(scores, axis=-1), value)  # [B, H, Tq, Ev]


ONE_ATTENTION_NODE_FROM_OPSET = 23  # torch.onnx writes ONNX's own `Attention` op from here on


def translation_table(opset: int) -> dict[Any, Any]:
    """{aten.scaled_dot_product_attention: translation} below opset 23, else empty (one
    `Attention` node, torch.onnx's, is best)."""
    import torch

    if opset >= ONE_ATTENTION_NODE_FROM_OPSET:
        return {}
    return {torch.ops.aten.scaled_dot_product_attention.default:
            aten_scaled_dot_product_attention}
