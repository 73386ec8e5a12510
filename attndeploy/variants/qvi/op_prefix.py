"""`attndeploy::QVIPrefixAttention`: the torch custom op, its fake, and its ONNX function body.

Letters: b batch, h heads, i/j positions, d head features.
"""

from __future__ import annotations

import onnxscript
import torch
from onnxscript import BOOL, FLOAT
from onnxscript import opset18 as op
from torch import Tensor

from attndeploy.opspec.bodies import (
    ATTNDEPLOY,
    FP32_MOST_NEGATIVE,
    CausalAllowed,
    MaskedSoftmax,
    ScaledScores,
    TFloat,
)
from attndeploy.variants.qvi import reference


@torch.library.custom_op("attndeploy::qvi_prefix_attention", mutates_args=())
def qvi_prefix_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    key_padding_mask: Tensor,
    past_values: Tensor,
    prefix_max: Tensor,
    prefix_den: Tensor,
    prefix_num: Tensor,
    u_weight: Tensor,
    u_bias: Tensor,
    w_weight: Tensor,
    w_bias: Tensor,
    gate_value_weight: Tensor,
    gate_interaction_weight: Tensor,
    gate_bias: Tensor,
    pool_weight: Tensor,
    *,
    scale: float,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Eager: `qvi.reference.qvi_prefix_attention`. Export: one `QVIPrefixAttention` node."""
    return reference.qvi_prefix_attention(
        query, key, value, key_padding_mask, past_values, prefix_max, prefix_den, prefix_num,
        u_weight, u_bias, w_weight, w_bias, gate_value_weight, gate_interaction_weight,
        gate_bias, pool_weight, scale=scale,
    )


@qvi_prefix_attention.register_fake
def _(query, key, value, key_padding_mask, past_values, prefix_max, prefix_den, prefix_num,
      *_weights, scale):
    output = query.new_empty(query.shape)  # [B, H, n, d]
    values = query.new_empty((*key.shape[:-1], value.shape[-1]))  # [B, H, P+n, d]
    return (output, values, prefix_max.new_empty(prefix_max.shape),
            prefix_den.new_empty(prefix_den.shape), prefix_num.new_empty(prefix_num.shape))


@onnxscript.script(ATTNDEPLOY, default_opset=op)
def QVIPrefixAttention(
    query: TFloat,
    key: TFloat,
    value: TFloat,
    key_padding_mask: BOOL,
    past_values: TFloat,
    prefix_max: TFloat,
    prefix_den: TFloat,
    prefix_num: TFloat,
    u_weight: TFloat,
    u_bias: TFloat,
    w_weight: TFloat,
    w_bias: TFloat,
    gate_value_weight: TFloat,
    gate_interaction_weight: TFloat,
    gate_bias: TFloat,
    pool_weight: TFloat,
    scale: float,
) -> tuple[TFloat, TFloat, TFloat, TFloat, TFloat]:
    """QVIPrefixAttention(query, key, value, key_padding_mask, past_values, prefix_max,
    prefix_den, prefix_num, u_weight, u_bias, w_weight, w_bias, gate_value_weight,
    gate_interaction_weight, gate_bias, pool_weight; scale: float)
    -> output, values, present_max, present_den, present_num

    Causal prefix-pooled QVI (docs/variants.md §5), a whole sequence or a decode step. query,
    value: the n new tokens' T [B,H,n,d]; key: T [B,H,P+n,d] and key_padding_mask: bool [B,P+n]
    cover the cached and the new tokens; past_values: the cached Ṽ T [B,H,P,d]; prefix_max,
    prefix_den: T [B,H], prefix_num: T [B,H,d], the running pooling sums (before any token: P = 0,
    the most negative finite value, 0, 0).

        a      = scale · (q_i · pool_weight_h)                              [B,H,n]
        past   = one pseudo-query: logit m + log(den), vector num / den (if den > 0)
        qbar_j = softmax over [past, real new queries i <= j] of the logits, applied to the
                 vectors; 0 at a padded j                                    [B,H,n,d]
        Vtil_j = Gamma_j ⊙ v_j + (1 - Gamma_j) ⊙ Vhat_j,  Vhat_j = (qbar_j @ u_weight + u_bias)
                 ⊙ (v_j @ w_weight + w_bias), Gamma as in QVIAttention
        values = [past_values; Vtil]                                        [B,H,P+n,d]
        output = softmax_j(scale · Q Kᵀ + M_causal) @ values                [B,H,n,d]
        m' = max(m, max real a);  den' = den·e^{m-m'} + Σ_real e^{a-m'};
        num' = num·e^{m-m'} + Σ_real e^{a-m'} q                             (in fp32)

    PyTorch: `attndeploy.variants.qvi.reference.qvi_prefix_attention`.
    """
    zero_i = op.Constant(value_int=0)
    one_i = op.Constant(value_int=1)
    num_new = op.Shape(query, start=2, end=3)  # [1]: n
    num_keys = op.Shape(key_padding_mask, start=1, end=2)  # [1]: P+n
    new_mask = op.Slice(key_padding_mask, op.Sub(num_keys, num_new), num_keys, [1])  # [B, n]
    q32 = op.Cast(query, to=FLOAT.dtype)  # [B, H, n, d]
    max32 = op.Cast(prefix_max, to=FLOAT.dtype)  # [B, H]
    den32 = op.Cast(prefix_den, to=FLOAT.dtype)  # [B, H]
    num32 = op.Cast(prefix_num, to=FLOAT.dtype)  # [B, H, d]
    pool32 = op.Cast(pool_weight, to=FLOAT.dtype)  # [H, d]
    pool_scores = op.Squeeze(op.MatMul(q32, op.Unsqueeze(pool32, [2])), [3])  # [B, H, n]
    pool_scores = op.Mul(op.Constant(value_float=scale), pool_scores)  # [B, H, n]: a

    tiny = op.Constant(value_float=1.1754943508222875e-38)
    zero = op.Constant(value_float=0.0)
    has_past = op.Greater(den32, zero)  # [B, H]
    safe_den = op.Max(den32, tiny)  # [B, H]
    past_logit = op.Where(
        has_past, op.Add(max32, op.Log(safe_den)), zero
    )  # [B, H]: masked out without a past (0 keeps the masked softmax finite)
    past_vector = op.Div(num32, op.Unsqueeze(safe_den, [2]))  # [B, H, d]
    logits = op.Concat(op.Unsqueeze(past_logit, [2]), pool_scores, axis=2)  # [B, H, 1+n]
    vectors = op.Concat(op.Unsqueeze(past_vector, [2]), q32, axis=2)  # [B, H, 1+n, d]
    positions = op.Range(zero_i, op.Squeeze(num_new, [0]), one_i)  # [n]
    before = op.LessOrEqual(
        op.Unsqueeze(positions, [0]), op.Unsqueeze(positions, [1])
    )  # [n(j), n(i)]: i <= j
    new_allowed = op.And(
        op.Unsqueeze(before, [0, 1]), op.Unsqueeze(new_mask, [1, 2])
    )  # [B, 1, n, n]
    rows_shape = op.Concat(op.Shape(query, start=0, end=3), op.Constant(value_ints=[1]), axis=0)
    square = op.Concat(op.Shape(query, start=0, end=3), num_new, axis=0)  # [B, H, n, n]
    allowed = op.Concat(
        op.Expand(op.Unsqueeze(has_past, [2, 3]), rows_shape), op.Expand(new_allowed, square),
        axis=3,
    )  # [B, H, n, 1+n]
    wide = op.Concat(op.Shape(query, start=0, end=3), op.Shape(logits, start=2, end=3), axis=0)
    beta = MaskedSoftmax(op.Expand(op.Unsqueeze(logits, [2]), wide), allowed)  # [B, H, n, 1+n]
    q_bar = op.Where(
        op.Unsqueeze(new_mask, [1, 3]), op.MatMul(beta, vectors), zero
    )  # [B, H, n, d]: 0 at padded positions
    q_bar = op.CastLike(q_bar, query)  # [B, H, n, d]

    u = op.Add(op.MatMul(q_bar, u_weight), op.Unsqueeze(u_bias, [1]))  # [B, H, n, d]
    w = op.Add(op.MatMul(value, w_weight), op.Unsqueeze(w_bias, [1]))  # [B, H, n, d]
    v_hat = op.Mul(u, w)  # [B, H, n, d]
    gate_logits = op.Add(
        op.Add(op.MatMul(value, gate_value_weight), op.MatMul(v_hat, gate_interaction_weight)),
        op.Unsqueeze(gate_bias, [1]),
    )  # [B, H, n, d]
    gamma = op.Sigmoid(gate_logits)  # [B, H, n, d]
    one = op.CastLike(1.0, query)
    v_tilde = op.Add(op.Mul(gamma, value), op.Mul(op.Sub(one, gamma), v_hat))  # [B, H, n, d]
    values = op.Concat(past_values, v_tilde, axis=2)  # [B, H, P+n, d]

    scores = ScaledScores(query, key, scale=scale)  # [B, H, n, P+n]
    probs = MaskedSoftmax(scores, CausalAllowed(query, key_padding_mask))  # [B, H, n, P+n]
    output = op.MatMul(probs, values)  # [B, H, n, d]

    real = op.Unsqueeze(new_mask, [1])  # [B, 1, n]
    real_scores = op.Where(real, pool_scores, op.Constant(value_float=FP32_MOST_NEGATIVE))
    new_max = op.Max(max32, op.ReduceMax(real_scores, [2], keepdims=0))  # [B, H]
    carried = op.Exp(op.Sub(max32, new_max))  # [B, H]
    weights = op.Where(
        real, op.Exp(op.Sub(pool_scores, op.Unsqueeze(new_max, [2]))), zero
    )  # [B, H, n]
    new_den = op.Add(op.Mul(den32, carried), op.ReduceSum(weights, [2], keepdims=0))  # [B, H]
    new_num = op.Add(
        op.Mul(num32, op.Unsqueeze(carried, [2])),
        op.Squeeze(op.MatMul(op.Unsqueeze(weights, [2]), q32), [2]),
    )  # [B, H, d]
    present_max = op.CastLike(new_max, query)
    present_den = op.CastLike(new_den, query)
    present_num = op.CastLike(new_num, query)
    return output, values, present_max, present_den, present_num
