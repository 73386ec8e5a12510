"""The `tempered` variant's op reference: one function per op, same arguments as the op."""
# ruff: noqa: I001  (here `attndeploy.variants.tempered` does not exist; ruff sorts it as third-party)

from __future__ import annotations

from torch import Tensor

from attndeploy.variants.functional import masked_softmax, resolve_scale


def tempered_attention(
    query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor,
    *, scale: float | None = None, tau: float = 1.0,
) -> Tensor:
    """TemperedAttention(query, key, value, key_padding_mask; scale, tau) -> output"""
    scores = resolve_scale(query, scale) * (query @ key.transpose(-2, -1)) / tau  # [B,H,T,T]
    return masked_softmax(scores, key_padding_mask[:, None, None, :]) @ value  # [B, H, T, d]
