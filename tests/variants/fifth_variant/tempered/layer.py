"""The `tempered` layer Letters: b h t d as in `_common`."""
# ruff: noqa: I001  (here `attndeploy.variants.tempered` does not exist; ruff sorts it as third-party)

from __future__ import annotations

from torch import Tensor

from attndeploy.variants.api import (
    AttentionBase,
    LayerContext,
    LayerResult,
    as_key_padding_mask,
    call_op,
)
from attndeploy.variants.tempered.reference import tempered_attention


class TemperedAttention(AttentionBase):
    def __init__(self, embed_dim: int, num_heads: int, *, tau: float = 1.0,
                 bias: bool = True, scale: float | None = None) -> None:
        super().__init__(embed_dim, num_heads, bias=bias, scale=scale)
        self.tau = float(tau)

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        mask = as_key_padding_mask(key_padding_mask, x)  # [B, T]
        q, k, v = self.project(x)  # [B, H, T, d]
        heads = call_op(tempered_attention, q, k, v, mask, scale=self.scale, tau=self.tau)
        return self.merge(heads)  # [B, T, D]

    @classmethod
    def from_config(cls, config, layer_index: int) -> TemperedAttention:
        return cls(config.d_model, config.n_heads, tau=config.tempered.tau)

    def forward_context(self, x: Tensor, context: LayerContext) -> LayerResult:
        return LayerResult(self(x, context.key_padding_mask))
