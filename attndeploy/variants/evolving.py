"""Evolving attention (variants.md §4). Letters: b h, i/j query/key positions, l layer.

Layer 0 of a chain is vanilla and hands on its zero-padded logits; every later layer mixes the
previous layer's logits with its own (alpha), refines them with a 3x3 conv over the maps (heads as
channels, weight beta) and hands the result on. The carried logits are explicit in and out.
"""

from __future__ import annotations

from torch import Tensor, nn

from attndeploy.config import ModelConfig
from attndeploy.errors import ConfigError
from attndeploy.variants import dispatch
from attndeploy.variants._common import AttentionBase, LayerContext
from attndeploy.variants.registry import register_variant


@register_variant("evolving")
class EvolvingAttention(AttentionBase):
    def __init__(self, config: ModelConfig, layer_index: int) -> None:
        super().__init__(config, layer_index)
        self.is_chain_start = layer_index == 0
        # Fixed hyperparameters, not learned (variants.md §4.3).
        self.alpha = config.evolving.alpha
        self.beta = config.evolving.beta
        self.negative_slope = config.evolving.negative_slope
        if not self.is_chain_start:
            self.conv = nn.Conv2d(config.n_heads, config.n_heads, kernel_size=3, padding=1)

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, context: LayerContext
    ) -> tuple[Tensor, Tensor]:
        m = context.key_padding_mask
        if self.is_chain_start:
            return dispatch.call("evolving_attention_start", q, k, v, m, scale=self.scale)
        if context.prev_logits is None:
            raise ConfigError(
                f"evolving attention layer {self.layer_index} needs the previous layer's logits"
            )
        return dispatch.call(
            "evolving_attention", q, k, v, m, context.prev_logits,
            self.conv.weight, self.conv.bias,
            scale=self.scale, alpha=self.alpha, beta=self.beta,
            negative_slope=self.negative_slope,
        )
