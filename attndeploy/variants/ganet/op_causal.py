"""`attndeploy::CausalGatedAttention`: the torch custom op, its fake, and its ONNX function body.

Letters: b batch, h heads, i query position (the last Tq keys), j key position, d features.
"""

from __future__ import annotations

import onnxscript
import torch
from onnxscript import BOOL, FLOAT, INT64
from onnxscript import opset18 as op
from torch import Tensor

from attndeploy.opspec.bodies import (
    ATTNDEPLOY,
    CausalAllowed,
    MaskedSoftmax,
    ScaledScores,
    TFloat,
)
from attndeploy.variants.ganet import reference


@torch.library.custom_op("attndeploy::causal_gated_attention", mutates_args=())
def causal_gated_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    key_padding_mask: Tensor,
    gate_logits: Tensor,
    *,
    scale: float,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Eager: `ganet.reference.causal_gated_attention`. Export: one `CausalGatedAttention`."""
    return reference.causal_gated_attention(
        query, key, value, key_padding_mask, gate_logits, scale=scale
    )


@causal_gated_attention.register_fake
def _(query, key, value, key_padding_mask, gate_logits, *, scale):
    batch, heads, _, dim = key.shape
    n_open = torch.library.get_ctx().new_dynamic_size()  # N: data-dependent
    output = query.new_empty((*query.shape[:-1], value.shape[-1]))  # [B, H, n, d]
    gates = key_padding_mask.new_empty(key_padding_mask.shape)  # [B, P+n]
    return (output, gates, key.new_empty((batch, heads, n_open, dim)),
            value.new_empty((batch, heads, n_open, value.shape[-1])),
            key_padding_mask.new_empty((batch, n_open)))


@onnxscript.script(ATTNDEPLOY, default_opset=op)
def CausalGatedAttention(
    query: TFloat,
    key: TFloat,
    value: TFloat,
    key_padding_mask: BOOL,
    gate_logits: TFloat,
    scale: float,
) -> tuple[TFloat, BOOL, TFloat, TFloat, BOOL]:
    """CausalGatedAttention(query, key, value, key_padding_mask, gate_logits; scale: float)
    -> output, gates, open_keys, open_values, open_slots

    GA-Net hard-gated attention under the causal rule (docs/variants.md §5), and what a cache
    that keeps open tokens only appends. query: T [B,H,n,d], the last n of the P+n keys; key,
    value: T [B,H,P+n,d] (the cache, then the new tokens); key_padding_mask, gate_logits:
    [B,P+n] (a cached slot's logit is positive, its mask says whether the slot holds a token).

        gates  = (gate_logits > 0) AND key_padding_mask     decided on the logit, fp32  [B,P+n]
        out    = softmax_j(scale · Q Kᵀ + M) @ V,  M open where j <= i and gates_j, and at j = i
                 (the per-row rescue: a closed token is read by itself only)        [B,H,n,d]
        N      = the batch's largest count of open new tokens (0 <= N <= n)
        slots  = the new tokens' positions, open first, in order (TopK), the first N
        open_keys, open_values = K, V of the new tokens at slots                     [B,H,N,d]
        open_slots = gates at slots (False: filler of a row with fewer open tokens)      [B,N]

    PyTorch: `attndeploy.variants.ganet.reference.causal_gated_attention`.
    """
    logits32 = op.Cast(gate_logits, to=FLOAT.dtype)  # [B, P+n]
    gates = op.And(op.Greater(logits32, op.Constant(value_float=0.0)), key_padding_mask)
    scores = ScaledScores(query, key, scale=scale)  # [B, H, n, P+n]
    probs = MaskedSoftmax(scores, CausalAllowed(query, gates))  # [B, H, n, P+n]
    output = op.MatMul(probs, value)  # [B, H, n, d]

    zero = op.Constant(value_ints=[0])
    num_new = op.Shape(query, start=2, end=3)  # [1]: n
    num_keys = op.Shape(key_padding_mask, start=1, end=2)  # [1]: P+n
    num_past = op.Sub(num_keys, num_new)  # [1]: P
    new_gates = op.Slice(gates, num_past, num_keys, [1])  # [B, n]
    new_int = op.Cast(new_gates, to=INT64.dtype)  # [B, n]
    open_count = op.ReduceSum(new_int, [1], keepdims=0)  # [B]
    slot_count = op.ReduceMax(open_count, [0], keepdims=1)  # [1]: N, may be 0
    positions = op.Range(
        op.Constant(value_int=0), op.Squeeze(num_new, [0]), op.Constant(value_int=1)
    )  # [n]
    order = op.Sub(
        op.Mul(new_int, op.Mul(op.Constant(value_int=2), num_new)), op.Unsqueeze(positions, [0])
    )  # [B, n]: open first, then by position, all distinct
    # TopK's k must be positive (ONNX): take max(N, 1) <= n and keep the first N.
    _, top = op.TopK(order, op.Max(slot_count, op.Constant(value_ints=[1])), axis=1)
    slots = op.Slice(top, zero, slot_count, [1])  # [B, N]
    slot_ok = op.GatherElements(new_gates, slots, axis=1)  # [B, N]
    row_index = op.Expand(
        op.Unsqueeze(op.Add(slots, num_past), [1, 3]),
        op.Concat(op.Shape(key, start=0, end=2), slot_count, op.Constant(value_ints=[1]), axis=0),
    )  # [B, H, N, 1]: positions among the P+n keys
    open_keys = op.GatherND(key, row_index, batch_dims=2)  # [B, H, N, d]
    open_values = op.GatherND(value, row_index, batch_dims=2)  # [B, H, N, d]
    open_slots = op.Identity(slot_ok)  # [B, N]
    return output, gates, open_keys, open_values, open_slots
