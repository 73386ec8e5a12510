"""Vanilla scaled dot-product attention, the baseline every variant reduces to.

Exports with the exporter's own attention translation (no custom op).
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from attndeploy.variants._common import AttentionBase, LayerContext
from attndeploy.variants.functional import additive_mask
from attndeploy.variants.registry import register_variant


@register_variant("standard")
class StandardAttention(AttentionBase):
    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, context: LayerContext
    ) -> tuple[Tensor, None]:
        mask = additive_mask(context.key_padding_mask[:, None, None, :], q.dtype)  # [B,1,1,T]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale), None
