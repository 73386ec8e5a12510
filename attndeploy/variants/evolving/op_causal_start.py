"""`attndeploy::CausalEvolvingAttentionStart`: the torch custom op, its fake, its ONNX body.

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
    ZeroCausal,
)
from attndeploy.variants.evolving import reference


@torch.library.custom_op("attndeploy::causal_evolving_attention_start", mutates_args=())
def causal_evolving_attention_start(
    query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor, *, scale: float
) -> tuple[Tensor, Tensor]:
    """Eager: `evolving.reference.causal_evolving_attention_start`. Export: one node."""
    return reference.causal_evolving_attention_start(
        query, key, value, key_padding_mask, scale=scale
    )


@causal_evolving_attention_start.register_fake
def _(query, key, value, key_padding_mask, *, scale):
    output = query.new_empty((*query.shape[:-1], value.shape[-1]))  # [B, H, Tq, d]
    logits = query.new_empty((*query.shape[:-1], key.shape[2]))  # [B, H, Tq, Tk]
    return output, logits


@onnxscript.script(ATTNDEPLOY, default_opset=op)
def CausalEvolvingAttentionStart(
    query: TFloat, key: TFloat, value: TFloat, key_padding_mask: BOOL, scale: float
) -> tuple[TFloat, TFloat]:
    """CausalEvolvingAttentionStart(query, key, value, key_padding_mask; scale: float)
    -> output, logits

    First layer of a causal evolving-attention chain (docs/variants.md §5): causal vanilla
    attention that hands on its zeroed logits. query: T [B,H,Tq,d], the last Tq of the Tk keys.

        S      = Z_c(scale · Q Kᵀ)    padded rows and columns and keys after the query set to 0
        out    = softmax_j(S + M_causal) @ V                            [B,H,Tq,d]
        logits = S                                                      [B,H,Tq,Tk]

    PyTorch: `attndeploy.variants.evolving.reference.causal_evolving_attention_start`.
    """
    logits = ZeroCausal(ScaledScores(query, key, scale=scale), key_padding_mask)  # [B,H,Tq,Tk]
    probs = MaskedSoftmax(logits, CausalAllowed(query, key_padding_mask))  # [B, H, Tq, Tk]
    output = op.MatMul(probs, value)  # [B, H, Tq, d]
    return output, logits
