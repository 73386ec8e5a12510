"""`attndeploy::QVIAttention`: the torch custom op, its fake, and its ONNX function body.

Letters: b batch, h heads, i query position, j key position, d head features.
"""

from __future__ import annotations

import onnxscript
import torch
from onnxscript import BOOL
from onnxscript import opset18 as op
from torch import Tensor

from attndeploy.opspec.bodies import ATTNDEPLOY, MaskedSoftmax, ScaledScores, TFloat
from attndeploy.variants.qvi import reference


@torch.library.custom_op("attndeploy::qvi_attention", mutates_args=())
def qvi_attention(
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
    """Eager: `functional.qvi_attention`. Export: one `attndeploy::QVIAttention` node."""
    return reference.qvi_attention(
        query, key, value, key_padding_mask, u_weight, u_bias, w_weight, w_bias,
        gate_value_weight, gate_interaction_weight, gate_bias, pool_weight, scale=scale,
    )


@qvi_attention.register_fake
def _(query, key, value, *_weights, scale):
    return query.new_empty((*query.shape[:-1], value.shape[-1]))  # [B, H, T, d]


@onnxscript.script(ATTNDEPLOY, default_opset=op)
def QVIAttention(
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
    """QVIAttention(query, key, value, key_padding_mask, u_weight, u_bias, w_weight, w_bias,
    gate_value_weight, gate_interaction_weight, gate_bias, pool_weight; scale: float) -> output

    Query-value interaction, pooled form (docs/ops.md). Q, K, V: T [B,H,T,d]; key_padding_mask: bool
    [B,T] (also the query mask); weights T [H,d,d], biases and pool_weight T [H,d].

        beta  = softmax_i(scale · (q_i · pool_weight_h) + M_i)          [B,H,T]
        qbar  = Σ_i beta_i q_i                                          [B,H,1,d]
        Vhat  = (qbar @ u_weight + u_bias) ⊙ (V @ w_weight + w_bias)    [B,H,T,d]
        Gamma = sigmoid(V @ gate_value_weight + Vhat @ gate_interaction_weight + gate_bias)
        Vtil  = Gamma ⊙ V + (1 - Gamma) ⊙ Vhat
        out   = softmax_k(S + M) @ Vtil,   S = scale · Q Kᵀ

    PyTorch: `attndeploy.variants.functional.qvi_attention`.
    """
    pool_column = op.Unsqueeze(pool_weight, [2])  # [H, d, 1]
    pool_scores = op.Squeeze(op.MatMul(query, pool_column), [3])  # [B, H, T]
    pool_scores = op.Mul(op.CastLike(scale, query), pool_scores)  # [B, H, T]
    beta = MaskedSoftmax(pool_scores, op.Unsqueeze(key_padding_mask, [1]))  # [B, H, T]
    q_bar = op.MatMul(op.Unsqueeze(beta, [2]), query)  # [B, H, 1, d]

    u = op.Add(op.MatMul(q_bar, u_weight), op.Unsqueeze(u_bias, [1]))  # [B, H, 1, d]
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
    probs = MaskedSoftmax(scores, op.Unsqueeze(key_padding_mask, [1, 2]))  # [B, H, T, T]
    output = op.MatMul(probs, v_tilde)  # [B, H, T, d]
    return output
