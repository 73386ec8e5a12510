"""The `sieve` variant's op reference: one function per op, same arguments as the op."""
# ruff: noqa: I001  (here `attndeploy.variants.sieve` does not exist; ruff sorts it as third-party)

from __future__ import annotations

from torch import Tensor

from attndeploy.variants.functional import hard_gates, masked_softmax, resolve_scale


def sieve_attention(
    query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor, gate_logits: Tensor,
    *, scale: float | None = None,
) -> Tensor:
    """SieveAttention(query, key, value, key_padding_mask, gate_logits; scale) -> output"""
    gates = hard_gates(gate_logits, key_padding_mask)  # [B, T]
    scores = resolve_scale(query, scale) * (query @ key.transpose(-2, -1))  # [B, H, T, T]
    return masked_softmax(scores, gates[:, None, None, :]) @ value  # [B, H, T, d]
