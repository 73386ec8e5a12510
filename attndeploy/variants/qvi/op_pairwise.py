"""`attndeploy::QVIPairwiseAttention`: the torch custom op, its fake, and its ONNX function body.

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


@torch.library.custom_op("attndeploy::qvi_pairwise_attention", mutates_args=())
def qvi_pairwise_attention(
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
    *,
    scale: float,
) -> Tensor:
    """Eager: `functional.qvi_pairwise_attention`. Export: one `QVIPairwiseAttention` node."""
    return reference.qvi_pairwise_attention(
        query, key, value, key_padding_mask, u_weight, u_bias, w_weight, w_bias,
        gate_value_weight, gate_interaction_weight, gate_bias, scale=scale,
    )


@qvi_pairwise_attention.register_fake
def _(query, key, value, *_weights, scale):
    return query.new_empty((*query.shape[:-1], value.shape[-1]))  # [B, H, Tq, d]


@onnxscript.script(ATTNDEPLOY, default_opset=op)
def QVIPairwiseAttention(
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
    scale: float,
) -> TFloat:
    """QVIPairwiseAttention(query, key, value, key_padding_mask, u_weight, u_bias, w_weight,
    w_bias, gate_value_weight, gate_interaction_weight, gate_bias; scale: float) -> output

    Query-value interaction, exact per-pair form (docs/ops.md), unchunked: the body materialises
    [B,H,Tq,Tk,d] (O(B·H·T²·d) memory; keep T small).

        u     = Q @ u_weight + u_bias                                   [B,H,Tq,d]
        w     = V @ w_weight + w_bias                                   [B,H,Tk,d]
        Vhat  = u_i ⊙ w_j                                               [B,H,Tq,Tk,d]
        Gamma = sigmoid(v_j @ gate_value_weight + Vhat_ij @ gate_interaction_weight + gate_bias)
        Vtil  = Gamma ⊙ v_j + (1 - Gamma) ⊙ Vhat_ij
        out_i = Σ_j softmax_k(S + M)_ij · Vtil_ij,   S = scale · Q Kᵀ

    PyTorch: `attndeploy.variants.functional.qvi_pairwise_attention` (any chunk_size).
    """
    scores = ScaledScores(query, key, scale=scale)  # [B, H, Tq, Tk]
    probs = MaskedSoftmax(scores, op.Unsqueeze(key_padding_mask, [1, 2]))  # [B, H, Tq, Tk]
    u = op.Add(op.MatMul(query, u_weight), op.Unsqueeze(u_bias, [1]))  # [B, H, Tq, d]
    w = op.Add(op.MatMul(value, w_weight), op.Unsqueeze(w_bias, [1]))  # [B, H, Tk, d]
    gate_from_value = op.Add(
        op.MatMul(value, gate_value_weight), op.Unsqueeze(gate_bias, [1])
    )  # [B, H, Tk, d]

    v_hat = op.Mul(op.Unsqueeze(u, [3]), op.Unsqueeze(w, [2]))  # [B, H, Tq, Tk, d]
    interaction = op.MatMul(
        v_hat, op.Unsqueeze(gate_interaction_weight, [1])
    )  # [B, H, Tq, Tk, d] @ [H, 1, d, d] -> [B, H, Tq, Tk, d]
    gamma = op.Sigmoid(op.Add(op.Unsqueeze(gate_from_value, [2]), interaction))  # [B,H,Tq,Tk,d]
    one = op.CastLike(1.0, query)
    v_tilde = op.Add(
        op.Mul(gamma, op.Unsqueeze(value, [2])), op.Mul(op.Sub(one, gamma), v_hat)
    )  # [B, H, Tq, Tk, d]

    weighted = op.MatMul(op.Unsqueeze(probs, [3]), v_tilde)  # [B, H, Tq, 1, d]
    output = op.Squeeze(weighted, [3])  # [B, H, Tq, d]
    return output
