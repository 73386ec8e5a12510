"""`attndeploy::BudgetGatedAttention`: the torch custom op, its fake, and its ONNX function body.

Letters: b batch, h heads, t position (queries and keys: self-attention), k kept slot, d features.
"""

from __future__ import annotations

import onnxscript
import torch
from onnxscript import BOOL, FLOAT, INT64
from onnxscript import opset18 as op
from torch import Tensor

from attndeploy.opspec.bodies import (
    ATTNDEPLOY,
    FP32_MOST_NEGATIVE,
    MaskedSoftmax,
    ScaledScores,
    TFloat,
)
from attndeploy.variants.ganet import reference
from attndeploy.variants.ganet.reference import BUDGET_SLACK


@torch.library.custom_op("attndeploy::budget_gated_attention", mutates_args=())
def budget_gated_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    key_padding_mask: Tensor,
    gate_logits: Tensor,
    *,
    scale: float,
    budget: float,
) -> tuple[Tensor, Tensor]:
    """Eager: `functional.budget_gated_attention`. Export: one `BudgetGatedAttention` node."""
    return reference.budget_gated_attention(
        query, key, value, key_padding_mask, gate_logits, scale=scale, budget=budget
    )


@budget_gated_attention.register_fake
def _(query, key, value, key_padding_mask, gate_logits, *, scale, budget):
    output = query.new_empty((*query.shape[:-1], value.shape[-1]))  # [B, H, T, d_v]
    return output, key_padding_mask.new_empty(key_padding_mask.shape)  # gates [B, T]


@onnxscript.script(ATTNDEPLOY, default_opset=op)
def BudgetGatedAttention(
    query: TFloat,
    key: TFloat,
    value: TFloat,
    key_padding_mask: BOOL,
    gate_logits: TFloat,
    scale: float,
    budget: float,
) -> tuple[TFloat, BOOL]:
    """BudgetGatedAttention(query, key, value, key_padding_mask, gate_logits; scale, budget)
    -> output, gates

    GA-Net with a per-row budget (docs/ops.md): each row keeps its k positions of largest gate
    logit, and only those attend, queries and keys; the other rows of the output are 0.

        k       = min(T, max(1, ceil(budget · T − 0.001)))      in fp32            [1]
        slots   = TopK_k(logits, pads most negative)     ties: smallest index    [B,k]
        slot_of = each position's slot, k if it is not kept or is a pad            [B,T]
        gates   = slot_of < k                                                      [B,T]
        Q_k,K_k,V_k = Q, K, V gathered along T at the slots                       [B,H,k,d]
        out_k   = softmax(scale · Q_k K_kᵀ + M_slot) @ V_k                         [B,H,k,d]
        output  = [out_k; 0] gathered along the slot axis at slot_of               [B,H,T,d]

    PyTorch: `attndeploy.variants.functional.budget_gated_attention`.
    """
    # The slots read only gate_logits and key_padding_mask, so in a model whose layers share
    # one gate vector onnxruntime's common-subexpression elimination computes them once.
    logits32 = op.Cast(gate_logits, to=FLOAT.dtype)  # [B, T]
    candidates = op.Where(
        key_padding_mask, logits32, op.Constant(value_float=FP32_MOST_NEGATIVE)
    )  # [B, T]
    num_positions = op.Shape(gate_logits, start=1, end=2)  # [1]: T
    wanted = op.Sub(
        op.Mul(op.Cast(num_positions, to=FLOAT.dtype), op.CastLike(budget, logits32)),
        op.Constant(value_float=BUDGET_SLACK),
    )  # [1]: budget · T − slack
    slot_count = op.Max(
        op.Min(op.Cast(op.Ceil(wanted), to=INT64.dtype), num_positions),
        op.Constant(value_ints=[1]),
    )  # [1]: k
    _, slots = op.TopK(candidates, slot_count, axis=1, largest=1, sorted=1)  # [B, k]
    slot_ok = op.GatherElements(key_padding_mask, slots, axis=1)  # [B, k]
    # Each position's slot, k (the zero row appended below) where it is not kept or is a pad:
    # a small scatter over [B, T]; the output is then gathered, not scattered, in whole rows.
    ranks = op.Expand(
        op.Range(op.Constant(value_int=0), op.Squeeze(slot_count, [0]), op.Constant(value_int=1)),
        op.Shape(slots),
    )  # [B, k]: 0 .. k-1
    unkept = op.Expand(slot_count, op.Shape(gate_logits))  # [B, T]: k everywhere
    slot_of = op.Where(key_padding_mask, op.ScatterElements(unkept, slots, ranks, axis=1),
                       slot_count)  # [B, T]
    gates = op.Less(slot_of, slot_count)  # [B, T]: kept and real

    # Gather whole rows: GatherND over the T axis with (b, h) as batch dims, one [B, H, k, 1]
    # index for queries, keys and values.
    batch_heads = op.Shape(query, start=0, end=2)  # [2]: B, H
    row_index = op.Expand(
        op.Unsqueeze(slots, [1, 3]),
        op.Concat(batch_heads, slot_count, op.Constant(value_ints=[1]), axis=0),
    )  # [B, H, k, 1]
    kept_queries = op.GatherND(query, row_index, batch_dims=2)  # [B, H, k, d]
    kept_keys = op.GatherND(key, row_index, batch_dims=2)  # [B, H, k, d]
    kept_values = op.GatherND(value, row_index, batch_dims=2)  # [B, H, k, d_v]

    scores = ScaledScores(kept_queries, kept_keys, scale=scale)  # [B, H, k, k]
    probs = MaskedSoftmax(scores, op.Unsqueeze(slot_ok, [1, 2]))  # [B, H, k, k]
    attended = op.MatMul(probs, kept_values)  # [B, H, k, d_v]

    # Back into T rows: append a zero row (slot k) and gather each position's slot row.
    zero_row = op.Expand(
        op.CastLike(0.0, attended),
        op.Concat(batch_heads, op.Constant(value_ints=[1]), op.Shape(value, start=3), axis=0),
    )  # [B, H, 1, d_v]
    with_zero = op.Concat(attended, zero_row, axis=2)  # [B, H, k+1, d_v]
    out_index = op.Expand(
        op.Unsqueeze(slot_of, [1, 3]),
        op.Concat(batch_heads, num_positions, op.Constant(value_ints=[1]), axis=0),
    )  # [B, H, T, 1]
    output = op.GatherND(with_zero, out_index, batch_dims=2)  # [B, H, T, d_v]
    return output, gates
