"""`attndeploy::CausalGatedAttention`: the torch custom op, its fake, and its ONNX function body.

Letters: b batch, h heads, i query position (the last Tq keys), j key position, d features.
"""

from __future__ import annotations

import onnxscript
import torch
from onnxscript import BOOL, FLOAT
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
) -> tuple[Tensor, Tensor]:
    """Eager: `ganet.reference.causal_gated_attention`. Export: one `CausalGatedAttention`."""
    return reference.causal_gated_attention(
        query, key, value, key_padding_mask, gate_logits, scale=scale
    )


@causal_gated_attention.register_fake
def _(query, key, value, key_padding_mask, gate_logits, *, scale):
    output = query.new_empty((*query.shape[:-1], value.shape[-1]))  # [B, H, Tq, d]
    return output, key_padding_mask.new_empty(key_padding_mask.shape)  # gates [B, Tk]


@onnxscript.script(ATTNDEPLOY, default_opset=op)
def CausalGatedAttention(
    query: TFloat,
    key: TFloat,
    value: TFloat,
    key_padding_mask: BOOL,
    gate_logits: TFloat,
    scale: float,
) -> tuple[TFloat, BOOL]:
    """CausalGatedAttention(query, key, value, key_padding_mask, gate_logits; scale: float)
    -> output, gates

    GA-Net hard-gated attention under the causal rule (docs/variants.md §5). query: T
    [B,H,Tq,d], the last Tq of the Tk keys; key_padding_mask, gate_logits: [B,Tk].

        gates = (gate_logits > 0) AND key_padding_mask      decided on the logit, in fp32 [B,Tk]
        out   = softmax_j(scale · Q Kᵀ + M) @ V,  M open where j <= i and gates_j, and at j = i
                (the per-row rescue: a closed token is read by itself only)       [B,H,Tq,d]

    PyTorch: `attndeploy.variants.ganet.reference.causal_gated_attention`.
    """
    logits32 = op.Cast(gate_logits, to=FLOAT.dtype)  # [B, Tk]
    gates = op.And(op.Greater(logits32, op.Constant(value_float=0.0)), key_padding_mask)
    scores = ScaledScores(query, key, scale=scale)  # [B, H, Tq, Tk]
    probs = MaskedSoftmax(scores, CausalAllowed(query, gates))  # [B, H, Tq, Tk]
    output = op.MatMul(probs, value)  # [B, H, Tq, d]
    return output, gates
