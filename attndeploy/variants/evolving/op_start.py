"""`attndeploy::EvolvingAttentionStart`: the torch custom op, its fake, and its ONNX body.

Letters: b batch, h heads, i query position, j key position, d head features.
"""

from __future__ import annotations

import onnxscript
import torch
from onnxscript import BOOL
from onnxscript import opset18 as op
from torch import Tensor

from attndeploy.opspec.bodies import (
    ATTNDEPLOY,
    MaskedSoftmax,
    ScaledScores,
    TFloat,
    ZeroPads,
)
from attndeploy.variants.evolving import reference


@torch.library.custom_op("attndeploy::evolving_attention_start", mutates_args=())
def evolving_attention_start(
    query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor, *, scale: float
) -> tuple[Tensor, Tensor]:
    """Eager: `functional.evolving_attention_start`. Export: one `EvolvingAttentionStart`."""
    return reference.evolving_attention_start(query, key, value, key_padding_mask, scale=scale)


@evolving_attention_start.register_fake
def _(query, key, value, key_padding_mask, *, scale):
    output = query.new_empty((*query.shape[:-1], value.shape[-1]))  # [B, H, T, d]
    logits = query.new_empty((*query.shape[:-1], key.shape[2]))  # [B, H, T, T]
    return output, logits


@onnxscript.script(ATTNDEPLOY, default_opset=op)
def EvolvingAttentionStart(
    query: TFloat, key: TFloat, value: TFloat, key_padding_mask: BOOL, scale: float
) -> tuple[TFloat, TFloat]:
    """EvolvingAttentionStart(query, key, value, key_padding_mask; scale: float)
    -> output, logits

    First layer of an evolving-attention chain (docs/ops.md): vanilla attention that hands on its
    pad-zeroed logits.

        S      = Z(scale · Q Kᵀ)    rows of padded queries, columns of padded keys set to 0
        out    = softmax_k(S + M) @ V                                    [B,H,T,d]
        logits = S                                                       [B,H,T,T]

    PyTorch: `attndeploy.variants.functional.evolving_attention_start`.
    """
    logits = ZeroPads(ScaledScores(query, key, scale=scale), key_padding_mask)  # [B, H, T, T]
    probs = MaskedSoftmax(logits, op.Unsqueeze(key_padding_mask, [1, 2]))  # [B, H, T, T]
    output = op.MatMul(probs, value)  # [B, H, T, d]
    return output, logits
