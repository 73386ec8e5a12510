"""What the op references of every variant share: scale, masks, the masked softmax, per-head maps,
the hard gates (docs/ops.md conventions; `functional` re-exports the public ones).

Letters: b batch, h heads, i query position, j key position, d/e head features.
"""

from __future__ import annotations

import torch
from torch import Tensor


def resolve_scale(query: Tensor, scale: float | None) -> float:
    """The factor on Q·Kᵀ: `scale` if given, else 1/sqrt(d)."""
    return float(scale) if scale is not None else query.shape[-1] ** -0.5


def additive_mask(allowed: Tensor, dtype: torch.dtype) -> Tensor:
    """0 where `allowed`, the most negative finite value of `dtype` elsewhere (same shape)."""
    zero = torch.zeros((), dtype=dtype, device=allowed.device)
    most_negative = torch.full((), torch.finfo(dtype).min, dtype=dtype, device=allowed.device)
    return torch.where(allowed, zero, most_negative)


def masked_softmax(scores: Tensor, allowed: Tensor) -> Tensor:
    """softmax over the last axis of `scores + M`, in fp32, cast back to the scores' dtype.

    `allowed` broadcasts against `scores` (bool, True = may be attended).
    """
    scores32 = scores.float()
    return torch.softmax(scores32 + additive_mask(allowed, torch.float32), dim=-1).to(scores.dtype)


def head_linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """Per-head affine map `x @ W[h] + b[h]`: x [B,H,T,d], W [H,d,e], b [H,e] -> [B,H,T,e]."""
    y = torch.einsum("bhtd,hde->bhte", x, weight)
    if bias is not None:
        y = y + bias[:, None, :]  # [H, 1, e] broadcast over B and T
    return y


def _scores(query: Tensor, key: Tensor, scale: float) -> Tensor:
    return scale * (query @ key.transpose(-2, -1))  # [B, H, Tq, Tk]


def _key_allowed(key_padding_mask: Tensor) -> Tensor:
    return key_padding_mask[:, None, None, :]  # [B, 1, 1, Tk]


def _pair_allowed(key_padding_mask: Tensor) -> Tensor:
    """True where both the query row and the key column are real: [B, 1, T, T]."""
    return key_padding_mask[:, None, :, None] & key_padding_mask[:, None, None, :]


def _zero_pads(x: Tensor, key_padding_mask: Tensor) -> Tensor:
    """Z(X): rows of padded queries and columns of padded keys set to 0 (with where)."""
    return torch.where(_pair_allowed(key_padding_mask), x, torch.zeros((), dtype=x.dtype))


def hard_gates(gate_logits: Tensor, key_padding_mask: Tensor) -> Tensor:
    """Hard 0/1 gates from the LOGITS (never from sigmoid): bool [B, T].

    open = (logit > 0) AND real; in a row with no open key, the real key with the largest logit
    opens (ties: smallest index); a row with no real key at all opens position 0.
    """
    is_open = (gate_logits > 0) & key_padding_mask  # [B, T]
    lowest = torch.full((), torch.finfo(gate_logits.dtype).min, dtype=gate_logits.dtype)
    candidates = torch.where(key_padding_mask, gate_logits, lowest)
    rescue_at = torch.argmax(candidates, dim=-1)  # first maximum; 0 for a row without real keys
    rescue_at = torch.where(key_padding_mask.any(-1), rescue_at, torch.zeros_like(rescue_at))
    positions = torch.arange(gate_logits.shape[-1], device=gate_logits.device)  # [T]
    rescued = (positions[None, :] == rescue_at[:, None]) & ~is_open.any(-1, keepdim=True)
    return is_open | rescued
