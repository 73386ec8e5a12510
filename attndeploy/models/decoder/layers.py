"""The parts a decoder block is built of besides attention: its norm, its feed-forward network
and its positions, each in the classic form (LayerNorm, GELU FFN, learned positions: our own
small decoder) and in the LLaMA family's (RMSNorm, SwiGLU, rotary positions: a converted
pretrained model, `attndeploy.integrations.hf_decoder`). `DecoderConfig` picks them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attndeploy.variants.api import Rotary, half_turn


class RMSNorm(nn.Module):
    """x / sqrt(mean(x²) + eps) · weight, computed in float32 (Hugging Face LLaMA's)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        dtype = x.dtype
        x = x.float()
        # x / sqrt(...), not x * rsqrt(...): onnxruntime fuses this form (Pow, ReduceMean,
        # Add, Sqrt, Div, Mul) into one SimplifiedLayerNormalization node
        x = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)  # [..., D]
        return self.weight * x.to(dtype)


class SwiGLU(nn.Module):
    """down(silu(gate(x)) · up(x)): LLaMA's feed-forward network."""

    def __init__(self, dim: int, hidden: int, bias: bool) -> None:
        super().__init__()
        self.gate = nn.Linear(dim, hidden, bias=bias)
        self.up = nn.Linear(dim, hidden, bias=bias)
        self.down = nn.Linear(hidden, dim, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))  # [B, n, D]


def norm(kind: str, dim: int, eps: float) -> nn.Module:
    return RMSNorm(dim, eps) if kind == "rms" else nn.LayerNorm(dim, eps=eps)


def feed_forward(kind: str, dim: int, hidden: int, bias: bool) -> nn.Module:
    if kind == "swiglu":
        return SwiGLU(dim, hidden, bias)
    return nn.Sequential(nn.Linear(dim, hidden, bias=bias), nn.GELU(),
                         nn.Linear(hidden, dim, bias=bias))


class RotaryPositions(nn.Module):
    """The (cos, sin) of each new token's angles: θ_k = base^(−2k/d), angle = position · θ_k,
    both halves of d alike (Hugging Face LLaMA's rotate_half convention)."""

    def __init__(self, head_dim: int, base: float) -> None:
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # [d/2]
        self.register_buffer("turn", half_turn(head_dim), persistent=False)  # [d, d]

    def forward(self, position_ids: Tensor) -> Rotary:
        angles = position_ids.float()[:, :, None] * self.inv_freq[None, None, :]  # [B, n, d/2]
        angles = torch.cat([angles, angles], dim=-1)[:, None]  # [B, 1, n, d]
        return angles.cos(), angles.sin(), self.turn
