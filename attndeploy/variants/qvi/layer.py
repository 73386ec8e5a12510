"""QVI: query-value interaction (docs/variants.md §2). Letters: b h t d as in `_common`.

Values are replaced by gated query-aware values Ṽ = Γ ⊙ V + (1 − Γ) ⊙ V̂; form `pooled` builds V̂
from one attention-pooled query per head, form `pairwise` from every (query, key) pair.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attndeploy.variants._common import (
    AttentionBase,
    LayerContext,
    LayerResult,
    as_key_padding_mask,
    call_op,
    per_head_weight,
)
from attndeploy.variants.qvi import reference
from attndeploy.variants.qvi.config import QVIConfig

GATE_BIAS_INIT = 2.0  # sigmoid(2) ≈ 0.88: the layer starts close to vanilla attention


class QVIAttention(AttentionBase):
    """Multi-head self-attention with query-value interaction (batch first).

    `QVIAttention(embed_dim, num_heads, *, form="pooled"|"pairwise", bias=True,
    pairwise_chunk=64, scale=None)`; `forward(x [B,T,D], key_padding_mask bool [B,T]) -> [B,T,D]`.
    Exports as one `attndeploy::QVIAttention` (pooled) or `QVIPairwiseAttention` node.
    `pairwise_chunk` is the query block size of the pairwise form in PyTorch (memory only).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        form: str = "pooled",
        bias: bool = True,
        pairwise_chunk: int = 64,
        scale: float | None = None,
    ) -> None:
        super().__init__(embed_dim, num_heads, bias=bias, scale=scale)
        QVIConfig(form=form, pairwise_chunk=pairwise_chunk)  # validates, says what to change
        h, d = self.n_heads, self.head_dim
        self.form = form
        self.pairwise_chunk = pairwise_chunk
        self.q_map_weight = per_head_weight(h, d)
        self.q_map_bias = nn.Parameter(torch.zeros(h, d))
        self.v_map_weight = per_head_weight(h, d)
        self.v_map_bias = nn.Parameter(torch.zeros(h, d))
        self.gate_v_weight = per_head_weight(h, d)
        self.gate_qv_weight = per_head_weight(h, d)
        self.gate_bias = nn.Parameter(torch.full((h, d), GATE_BIAS_INIT))
        if self.form == "pooled":
            self.pool_weight = nn.Parameter(torch.zeros(h, d))

    @torch.no_grad()
    def start_as_vanilla(self) -> None:
        """u = Lin(q̄) = 1 and w = Lin(V) = V, so V̂ = u ⊙ w = V and Ṽ = Γ ⊙ V + (1 − Γ) ⊙ V = V
        whatever the gate says: exactly vanilla attention, and every map still learns (V̂'s
        gradient is (1 − Γ) ⊙ ∂Ṽ, Γ ≈ 0.88); the gate learns once V̂ leaves V."""
        self.q_map_weight.zero_()
        self.q_map_bias.fill_(1.0)
        self.v_map_weight.copy_(torch.eye(self.head_dim).expand_as(self.v_map_weight))
        self.v_map_bias.zero_()

    def forward(self, x: Tensor, key_padding_mask: Tensor | None = None) -> Tensor:
        mask = as_key_padding_mask(key_padding_mask, x)  # [B, T]
        q, k, v = self.project(x)  # [B, H, T, d]
        return self.merge(self.attend(q, k, v, mask))  # [B, T, D]

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
        weights = (
            self.q_map_weight, self.q_map_bias, self.v_map_weight, self.v_map_bias,
            self.gate_v_weight, self.gate_qv_weight, self.gate_bias,
        )
        if self.form == "pooled":
            return call_op(
                reference.qvi_attention, q, k, v, mask, *weights, self.pool_weight,
                scale=self.scale,
            )
        return call_op(
            reference.qvi_pairwise_attention, q, k, v, mask, *weights,
            scale=self.scale, chunk_size=self.pairwise_chunk,
        )

    @classmethod
    def from_config(cls, config, layer_index: int) -> QVIAttention:
        return cls(config.d_model, config.n_heads, form=config.qvi.form,
                   pairwise_chunk=config.qvi.pairwise_chunk)

    def forward_context(self, x: Tensor, context: LayerContext) -> LayerResult:
        return LayerResult(self(x, context.key_padding_mask))
