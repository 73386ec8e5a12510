"""What every attention variant shares: projections, head split/merge, the layer hand-off.

Letters: b batch, h heads, t positions, d head dim, D model dim.
A variant module holds only its own maths; everything here is written once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor, nn

from attndeploy.config import ModelConfig


@dataclass(frozen=True)
class LayerContext:
    """Per-forward state handed to every attention layer of one model.

    key_padding_mask: bool [B, T], True = real token.
    gate_logits: GA-Net decision logits [B, T] (s, or s + noise in `sample` mode).
    log_gates: GA-Net training-time log g_soft [B, T] (None in eval).
    hard_gates: GA-Net hard sampled gates [B, T] for straight-through training (else None).
    prev_logits: Evolving attention's carried logits A^{l-1} [B, H, T, T] (None at a chain start).
    """

    key_padding_mask: Tensor
    gate_logits: Tensor | None = None
    log_gates: Tensor | None = None
    hard_gates: Tensor | None = None
    prev_logits: Tensor | None = None

    def with_prev_logits(self, logits: Tensor | None) -> LayerContext:
        return replace(self, prev_logits=logits)


@dataclass(frozen=True)
class LayerResult:
    """An attention layer's output [B, T, D] and what it hands on (Evolving: logits)."""

    output: Tensor
    logits: Tensor | None = None


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    batch, t, width = x.shape
    return x.view(batch, t, n_heads, width // n_heads).transpose(1, 2)  # [B, H, T, d]


def merge_heads(x: Tensor) -> Tensor:
    batch, heads, t, dim = x.shape
    return x.transpose(1, 2).reshape(batch, t, heads * dim)  # [B, T, D]


def per_head_weight(n_heads: int, dim: int) -> nn.Parameter:
    """[H, d, d] weight initialised U(±1/sqrt(d)) (variants.md §2.2)."""
    bound = dim**-0.5
    return nn.Parameter(torch.empty(n_heads, dim, dim).uniform_(-bound, bound))


class AttentionBase(nn.Module):
    """Q/K/V and output projections plus head split/merge; subclasses implement `attend`."""

    def __init__(self, config: ModelConfig, layer_index: int) -> None:
        super().__init__()
        self.config = config
        self.layer_index = layer_index
        self.n_heads = config.n_heads
        self.head_dim = config.head_dim
        self.scale = config.head_dim**-0.5
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.out = nn.Linear(config.d_model, config.d_model)

    def forward(self, x: Tensor, context: LayerContext) -> LayerResult:
        q, k, v = self.qkv(x).chunk(3, dim=-1)  # 3 x [B, T, D]
        q, k, v = (split_heads(t, self.n_heads) for t in (q, k, v))  # [B, H, T, d]
        heads, logits = self.attend(q, k, v, context)  # [B, H, T, d]
        return LayerResult(self.out(merge_heads(heads)), logits)

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, context: LayerContext
    ) -> tuple[Tensor, Tensor | None]:
        raise NotImplementedError
