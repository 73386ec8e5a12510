"""`attndeploy::QVIPrefixAttention`: the torch custom op, its fake, and its ONNX function body.

Letters: b batch, h heads, i/j positions, d head features.
"""

from __future__ import annotations

import onnxscript
import torch
from onnxscript import BOOL
from onnxscript import opset18 as op
from torch import Tensor

from attndeploy.opspec.bodies import (
    ATTNDEPLOY,
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
) -> Tensor:
    """Eager: `qvi.reference.qvi_prefix_attention`. Export: one `QVIPrefixAttention` node."""
    return reference.qvi_prefix_attention(
        query, key, value, key_padding_mask, u_weight, u_bias, w_weight, w_bias,
        gate_value_weight, gate_interaction_weight, gate_bias, pool_weight, scale=scale,
    )


@qvi_prefix_attention.register_fake
def _(query, key, value, *_weights, scale):
    return query.new_empty((*query.shape[:-1], value.shape[-1]))  # [B, H, T, d]


@onnxscript.script(ATTNDEPLOY, default_opset=op)
def QVIPrefixAttention(
    query: TFloat,
    key: TFloat,
    value: TFloat,
    key_padding_mask: BOOL,
    u_weight: TFloat,
    u_bias: TFloat,
    w_weight: TFloat,
    w_bias: TFloat,
    gate_value_weight: TFloat,
    gate_interaction_weight: TFloat,
    gate_bias: TFloat,
    pool_weight: TFloat,
    scale: float,
) -> TFloat:
    """QVIPrefixAttention(query, key, value, key_padding_mask, u_weight, u_bias, w_weight,
    w_bias, gate_value_weight, gate_interaction_weight, gate_bias, pool_weight; scale: float)
    -> output

    Causal prefix-pooled QVI over a whole sequence (docs/variants.md §5; Tq = Tk = T): the
    summary paired with value j pools the real queries up to j.

        a      = scale · (q_i · pool_weight_h)                            [B,H,T]
        beta   = softmax_i(a_i + M_causal[j, i])   per row j            [B,H,T,T]
        qbar_j = Σ_i beta_ji q_i, 0 at a padded j                        [B,H,T,d]
        Vtil_j = Gamma_j ⊙ v_j + (1 - Gamma_j) ⊙ Vhat_j,  Vhat_j = (qbar_j @ u_weight + u_bias)
                 ⊙ (v_j @ w_weight + w_bias), Gamma as in QVIAttention
        out    = softmax_j(S + M_causal) @ Vtil,   S = scale · Q Kᵀ

    PyTorch: `attndeploy.variants.qvi.reference.qvi_prefix_attention`.
    """
    allowed = CausalAllowed(query, key_padding_mask)  # [B, 1, T, T]
    pool_column = op.Unsqueeze(pool_weight, [2])  # [H, d, 1]
    pool_scores = op.Squeeze(op.MatMul(query, pool_column), [3])  # [B, H, T]
    pool_scores = op.Mul(op.CastLike(scale, query), pool_scores)  # [B, H, T]
    square = op.Concat(op.Shape(query, start=0, end=3), op.Shape(query, start=2, end=3), axis=0)
    pool_rows = op.Expand(op.Unsqueeze(pool_scores, [2]), square)  # [B, H, T(j), T(i)]
    beta = MaskedSoftmax(pool_rows, allowed)  # [B, H, T, T]
    q_bar = op.MatMul(beta, query)  # [B, H, T, d]
    q_bar = op.Where(
        op.Unsqueeze(key_padding_mask, [1, 3]), q_bar, op.CastLike(0.0, query)
    )  # [B, H, T, d]: 0 at padded positions

    u = op.Add(op.MatMul(q_bar, u_weight), op.Unsqueeze(u_bias, [1]))  # [B, H, T, d]
    w = op.Add(op.MatMul(value, w_weight), op.Unsqueeze(w_bias, [1]))  # [B, H, T, d]
    v_hat = op.Mul(u, w)  # [B, H, T, d]
    gate_logits = op.Add(
        op.Add(op.MatMul(value, gate_value_weight), op.MatMul(v_hat, gate_interaction_weight)),
        op.Unsqueeze(gate_bias, [1]),
    )  # [B, H, T, d]
    gamma = op.Sigmoid(gate_logits)  # [B, H, T, d]
    one = op.CastLike(1.0, query)
    v_tilde = op.Add(op.Mul(gamma, value), op.Mul(op.Sub(one, gamma), v_hat))  # [B, H, T, d]

    scores = ScaledScores(query, key, scale=scale)  # [B, H, T, T]
    probs = MaskedSoftmax(scores, allowed)  # [B, H, T, T]
    output = op.MatMul(probs, v_tilde)  # [B, H, T, d]
    return output
