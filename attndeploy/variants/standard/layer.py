"""Vanilla scaled dot-product attention, the baseline every variant reduces to.

Letters: b batch, h heads, t positions, d head dim. Exports with the exporter's own attention
translation (no custom op): `softmax(S + M) V` as `F.scaled_dot_product_attention`.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from attndeploy.variants._common import (
    AttentionBase,
    LayerContext,
    LayerResult,
    as_key_padding_mask,
)
from attndeploy.variants.functional import additive_mask


class StandardAttention(AttentionBase):
    """Multi-head self-attention: `forward(x [B,T,D], key_padding_mask [B,T]) -> y [B,T,D]`."""

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        mask = as_key_padding_mask(key_padding_mask, x)  # [B, T]
        q, k, v = self.project(x)  # [B, H, T, d]
        return self.merge(self.attend(q, k, v, mask))  # [B, T, D]

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
        additive = additive_mask(mask[:, None, None, :], q.dtype)  # [B, 1, 1, T]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=additive, scale=self.scale)

    @classmethod
    def from_config(cls, config, layer_index: int) -> StandardAttention:
        return cls(config.d_model, config.n_heads)

    def forward_context(self, x: Tensor, context: LayerContext) -> LayerResult:
        return LayerResult(self(x, context.key_padding_mask))
