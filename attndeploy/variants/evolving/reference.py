"""Evolving Attention's op references (docs/variants.md §4): `EvolvingAttentionStart`,
`EvolvingAttention`.

Letters: b batch, h heads, i query position, j key position, d/e head features. Conventions as in
`attndeploy.variants.functional` (docs/ops.md), which re-exports these as the stable functional
API; the layer and the op run them (`call_op`), and the ONNX bodies are tested against them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from attndeploy.variants._causal import causal_allowed
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


# ----------------------------------------------------------------------------- causal forms
# docs/variants.md §5: queries are the last Tq of the Tk keys; a map's strict upper triangle
# (key after query) is zeroed like its pads, and the conv is row-causal (2 rows of zero padding
# above, none below, one column each side), so row i of the maps reads tokens <= i only.


def _zero_causal(x: Tensor, key_padding_mask: Tensor) -> Tensor:
    """Z_c(X) for maps X [B,H,Tq,Tk]: padded query rows, padded key columns and keys after the
    query (j > i) set to 0, with where."""
    t_q, t_k = x.shape[-2:]
    rows = torch.arange(t_q, device=x.device)[:, None] + (t_k - t_q)  # [Tq, 1]
    cols = torch.arange(t_k, device=x.device)[None, :]  # [1, Tk]
    keep = (
        (cols <= rows)[None, None]
        & key_padding_mask[:, None, -t_q:, None]
        & key_padding_mask[:, None, None, :]
    )  # [B, 1, Tq, Tk]
    return torch.where(keep, x, torch.zeros((), dtype=x.dtype))


def causal_evolving_attention_start(
    query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor,
    *, scale: float | None = None,
) -> tuple[Tensor, Tensor]:
    """CausalEvolvingAttentionStart(query, key, value, key_padding_mask; scale) -> output, logits

    Causal vanilla attention that hands on S = Z_c(scale · Q Kᵀ) [B, H, Tq, Tk].
    """
    scale = resolve_scale(query, scale)
    logits = _zero_causal(_scores(query, key, scale), key_padding_mask)  # [B, H, Tq, Tk]
    probs = masked_softmax(logits, causal_allowed(key_padding_mask, query.shape[2]))
    return probs @ value, logits  # [B, H, Tq, d]


def causal_evolving_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    key_padding_mask: Tensor,
    prev_logits: Tensor,
    past_rows: Tensor,
    conv_weight: Tensor,
    conv_bias: Tensor,
    *,
    scale: float | None = None,
    alpha: float,
    beta: float,
    negative_slope: float = 0.0,
) -> tuple[Tensor, Tensor, Tensor]:
    """CausalEvolvingAttention(query, key, value, key_padding_mask, prev_logits, past_rows,
    conv_weight, conv_bias; scale, alpha, beta, negative_slope) -> output, logits, rows

    prev_logits: A^{l-1}'s rows of the queries [B,H,Tq,Tk]; past_rows: the last two rows of this
    layer's mixed map A_in before the first query [B,H,2,Tk] (zeros at the start and in columns
    not yet seen). A_in = α·Z_c(prev) + (1−α)·Z_c(S); C = LeakyReLU(Conv3x3 over [past_rows;
    A_in], no row padding, one column each side); A = Z_c(β·C + (1−β)·A_in);
    output = softmax(A + M_causal) V; logits = A; rows = the last two rows of [past_rows; A_in].
    """
    scale = resolve_scale(query, scale)
    current = _zero_causal(_scores(query, key, scale), key_padding_mask)  # [B, H, Tq, Tk]
    mixed = alpha * _zero_causal(prev_logits, key_padding_mask) + (1 - alpha) * current
    stacked = torch.cat([past_rows, mixed], dim=2)  # [B, H, 2+Tq, Tk]
    conv = F.conv2d(F.pad(stacked, (1, 1, 0, 0)), conv_weight, conv_bias)  # [B, H, Tq, Tk]
    conv = F.leaky_relu(conv, negative_slope)
    logits = _zero_causal(beta * conv + (1 - beta) * mixed, key_padding_mask)  # [B, H, Tq, Tk]
    probs = masked_softmax(logits, causal_allowed(key_padding_mask, query.shape[2]))
    return probs @ value, logits, stacked[:, :, -2:]  # [B,H,Tq,d], [B,H,Tq,Tk], [B,H,2,Tk]
