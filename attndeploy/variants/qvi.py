"""QVI: query-value interaction (variants.md §2). Letters: b h t d as in `_common`.

Values are replaced by gated query-aware values Ṽ = Γ ⊙ V + (1 − Γ) ⊙ V̂; form `pooled` builds V̂
from one attention-pooled query per head, form `pairwise` from every (query, key) pair.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attndeploy.config import ModelConfig
from attndeploy.variants import dispatch
from attndeploy.variants._common import AttentionBase, LayerContext, per_head_weight
from attndeploy.variants.registry import register_variant

GATE_BIAS_INIT = 2.0  # sigmoid(2) ≈ 0.88: the layer starts close to vanilla attention


@register_variant("qvi")
class QVIAttention(AttentionBase):
    def __init__(self, config: ModelConfig, layer_index: int) -> None:
        super().__init__(config, layer_index)
        h, d = config.n_heads, config.head_dim
        self.form = config.qvi.form
        self.pairwise_chunk = config.qvi.pairwise_chunk
        self.q_map_weight = per_head_weight(h, d)
        self.q_map_bias = nn.Parameter(torch.zeros(h, d))
        self.v_map_weight = per_head_weight(h, d)
        self.v_map_bias = nn.Parameter(torch.zeros(h, d))
        self.gate_v_weight = per_head_weight(h, d)
        self.gate_qv_weight = per_head_weight(h, d)
        self.gate_bias = nn.Parameter(torch.full((h, d), GATE_BIAS_INIT))
        if self.form == "pooled":
            self.pool_weight = nn.Parameter(torch.zeros(h, d))

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, context: LayerContext
    ) -> tuple[Tensor, None]:
        weights = (
            self.q_map_weight, self.q_map_bias, self.v_map_weight, self.v_map_bias,
            self.gate_v_weight, self.gate_qv_weight, self.gate_bias,
        )
        m = context.key_padding_mask
        if self.form == "pooled":
            out = dispatch.call(
                "qvi_attention", q, k, v, m, *weights, self.pool_weight, scale=self.scale
            )
        else:
            out = dispatch.call(
                "qvi_pairwise_attention", q, k, v, m, *weights,
                scale=self.scale, chunk_size=self.pairwise_chunk,
            )
        return out, None
