"""`attndeploy::GatedAttentionPooling`: the torch custom op, its fake, and its ONNX body.

Letters: b batch, t position, d model features.
"""

from __future__ import annotations

import onnxscript
import torch
from onnxscript import BOOL
from onnxscript import opset18 as op
from torch import Tensor

from attndeploy.opspec.bodies import ATTNDEPLOY, HardGates, MaskedSoftmax, TFloat
from attndeploy.variants.ganet import reference


@torch.library.custom_op("attndeploy::gated_attention_pooling", mutates_args=())
def gated_attention_pooling(
    values: Tensor, scores: Tensor, key_padding_mask: Tensor, gate_logits: Tensor
) -> tuple[Tensor, Tensor]:
    """Eager: `functional.gated_attention_pooling`. Export: one `GatedAttentionPooling` node."""
    return reference.gated_attention_pooling(values, scores, key_padding_mask, gate_logits)


@gated_attention_pooling.register_fake
def _(values, scores, key_padding_mask, gate_logits):
    context = values.new_empty((values.shape[0], values.shape[2]))  # [B, D]
    return context, key_padding_mask.new_empty(key_padding_mask.shape)  # gates [B, T]


@onnxscript.script(ATTNDEPLOY, default_opset=op)
def GatedAttentionPooling(
    values: TFloat, scores: TFloat, key_padding_mask: BOOL, gate_logits: TFloat
) -> tuple[TFloat, BOOL]:
    """GatedAttentionPooling(values, scores, key_padding_mask, gate_logits) -> context, gates

    GA-Net gated additive attention pooling (docs/ops.md). values: T [B,T,D]; scores, gate_logits:
    T [B,T]; key_padding_mask: bool [B,T].

        gates   = (gate_logits > 0) AND key_padding_mask, plus the rescue of GatedAttention
        alpha   = softmax over open positions of scores                  [B,T]
        context = Σ_t alpha_t values_t                                   [B,D]

    PyTorch: `attndeploy.variants.functional.gated_attention_pooling`.
    """
    gates = HardGates(gate_logits, key_padding_mask)  # [B, T]
    alpha = MaskedSoftmax(scores, gates)  # [B, T]
    weighted = op.MatMul(op.Unsqueeze(alpha, [1]), values)  # [B, 1, T] @ [B, T, D] -> [B, 1, D]
    context = op.Squeeze(weighted, [1])  # [B, D]
    return context, gates
