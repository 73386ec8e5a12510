"""Evolving Attention's op references (docs/variants.md §4): `EvolvingAttentionStart`,
`EvolvingAttention`.

Letters: b batch, h heads, i query position, j key position, d/e head features. Conventions as in
`attndeploy.variants.functional` (docs/ops.md), which re-exports these as the stable functional
API; the layer and the op run them (`call_op`), and the ONNX bodies are tested against them.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from attndeploy.variants._reference import (
    _key_allowed,
    _scores,
    _zero_pads,
    masked_softmax,
    resolve_scale,
)


def evolving_attention_start(
    query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor,
    *, scale: float | None = None,
) -> tuple[Tensor, Tensor]:
    """EvolvingAttentionStart(query, key, value, key_padding_mask; scale) -> output, logits

    Vanilla attention that also hands on its zero-padded logits S = Z(scale · Q Kᵀ).
    """
    scale = resolve_scale(query, scale)
    logits = _zero_pads(_scores(query, key, scale), key_padding_mask)  # [B, H, T, T]
    probs = masked_softmax(logits, _key_allowed(key_padding_mask))
    return probs @ value, logits


def evolving_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    key_padding_mask: Tensor,
    prev_logits: Tensor,
    conv_weight: Tensor,
    conv_bias: Tensor,
    *,
    scale: float | None = None,
    alpha: float,
    beta: float,
    negative_slope: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """EvolvingAttention(query, key, value, key_padding_mask, prev_logits, conv_weight, conv_bias;
    scale, alpha, beta, negative_slope) -> output, logits

    A_in = α·Z(prev) + (1−α)·Z(S);  C = LeakyReLU(Conv3x3(A_in));  A = Z(β·C + (1−β)·A_in);
    output = softmax_k(A + M) V;  logits = A. The mask enters only the final softmax.
    """
    scale = resolve_scale(query, scale)
    current = _zero_pads(_scores(query, key, scale), key_padding_mask)  # [B, H, T, T]
    mixed = alpha * _zero_pads(prev_logits, key_padding_mask) + (1 - alpha) * current
    conv = F.leaky_relu(F.conv2d(mixed, conv_weight, conv_bias, padding=1), negative_slope)
    logits = _zero_pads(beta * conv + (1 - beta) * mixed, key_padding_mask)  # [B, H, T, T]
    probs = masked_softmax(logits, _key_allowed(key_padding_mask))
    return probs @ value, logits
