"""`attndeploy::TemperedAttention`: the torch custom op, its fake, and its ONNX function body."""
# ruff: noqa: I001  (here `attndeploy.variants.tempered` does not exist; ruff sorts it as third-party)

from __future__ import annotations

import onnxscript
import torch
from onnxscript import BOOL
from onnxscript import opset18 as op
from torch import Tensor

from attndeploy.opspec.bodies import ATTNDEPLOY, MaskedSoftmax, ScaledScores, TFloat
from attndeploy.variants.tempered.reference import tempered_attention as reference


@torch.library.custom_op("attndeploy::tempered_attention", mutates_args=())
def tempered_attention(
    query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor,
    *, scale: float, tau: float,
) -> Tensor:
    return reference(query, key, value, key_padding_mask, scale=scale, tau=tau)


@tempered_attention.register_fake
def _(query, key, value, key_padding_mask, *, scale, tau):
    return query.new_empty((*query.shape[:-1], value.shape[-1]))  # [B, H, T, d]


@onnxscript.script(ATTNDEPLOY, default_opset=op)
def TemperedAttention(
    query: TFloat, key: TFloat, value: TFloat, key_padding_mask: BOOL, scale: float, tau: float
) -> TFloat:
    """TemperedAttention(query, key, value, key_padding_mask; scale, tau) -> output"""
    scores = ScaledScores(query, key, scale=scale)  # [B, H, T, T]
    tempered = op.Div(scores, op.CastLike(tau, scores))
    probs = MaskedSoftmax(tempered, op.Unsqueeze(key_padding_mask, [1, 2]))  # [B, H, T, T]
    output = op.MatMul(probs, value)  # [B, H, T, d]
    return output
