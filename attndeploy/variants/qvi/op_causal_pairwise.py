"""`attndeploy::QVICausalPairwiseAttention`: the torch custom op, its fake, its ONNX body.

Letters: b batch, h heads, i query position (the last Tq keys), j key position, d features.
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


@torch.library.custom_op("attndeploy::qvi_causal_pairwise_attention", mutates_args=())
def qvi_causal_pairwise_attention(
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
    """Eager: `qvi.reference.qvi_causal_pairwise_attention`. Export: one node."""
    return reference.qvi_causal_pairwise_attention(
        query, key, value, key_padding_mask, u_weight, u_bias, w_weight, w_bias,
        gate_value_weight, gate_interaction_weight, gate_bias, scale=scale,
    )


@qvi_causal_pairwise_attention.register_fake
def _(query, key, value, *_weights, scale):
    return query.new_empty((*query.shape[:-1], value.shape[-1]))  # [B, H, Tq, d]


@onnxscript.script(ATTNDEPLOY, default_opset=op)
def QVICausalPairwiseAttention(
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
    """QVICausalPairwiseAttention(query, key, value, key_padding_mask, u_weight, u_bias,
    w_weight, w_bias, gate_value_weight, gate_interaction_weight, gate_bias; scale: float)
    -> output

    The pairwise form under the causal rule (docs/variants.md §5). query: T [B,H,Tq,d], the last
    Tq of the Tk keys (Tq = Tk for a whole sequence, Tq < Tk when decoding with a cache); key,
    value: T [B,H,Tk,d]; key_padding_mask: bool [B,Tk].

        P     = softmax_j(S + M_causal),  S = scale · Q Kᵀ,  M_causal from CausalAllowed
        Vtil  = Gamma_ij ⊙ v_j + (1 - Gamma_ij) ⊙ (u_i ⊙ w_j)     as QVIPairwiseAttention
        out_i = Σ_j P_ij · Vtil_ij                                   [B,H,Tq,d]

    PyTorch: `attndeploy.variants.qvi.reference.qvi_causal_pairwise_attention`.
    """
    scores = ScaledScores(query, key, scale=scale)  # [B, H, Tq, Tk]
    probs = MaskedSoftmax(scores, CausalAllowed(query, key_padding_mask))  # [B, H, Tq, Tk]
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
