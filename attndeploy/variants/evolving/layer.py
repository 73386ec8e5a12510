"""Evolving attention (docs/variants.md §4). Letters: b h, i/j query/key positions, l layer.

The first layer of a chain is vanilla and hands on its zero-padded logits; every later layer mixes
the previous layer's logits with its own (alpha), refines them with a 3x3 conv over the maps
(heads as channels, weight beta) and hands the result on. The carried logits are explicit in and
out: `forward(x, key_padding_mask, prev_logits=None) -> (y, logits)`.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attndeploy.errors import ConfigError
from attndeploy.variants._common import (
    AttentionBase,
    LayerContext,
    LayerResult,
    as_key_padding_mask,
    call_op,
)
from attndeploy.variants.evolving import reference
from attndeploy.variants.evolving.config import EvolvingConfig


class EvolvingAttention(AttentionBase):
    """Multi-head self-attention over evolving logits (batch first).

    `EvolvingAttention(embed_dim, num_heads, *, alpha=0.5, beta=1.0, negative_slope=0.0,
    chain_start=False, bias=True, scale=None)`.
    `forward(x [B,T,D], key_padding_mask bool [B,T], prev_logits [B,H,T,T] | None = None)
    -> (y [B,T,D], logits [B,H,T,T])`: hand `logits` to the next layer of the chain. With
    `prev_logits=None` the layer starts a chain (vanilla attention, the conv unused); a layer made
    with `chain_start=True` has no conv parameters (9H²+H fewer) and always starts one.
    alpha, beta and negative_slope are fixed hyperparameters, not learned (docs/variants.md §4.3);
    a warm start (`start_as_vanilla`) brings α and β in from 0 while fine-tuning (`mix`).
    Exports as one `attndeploy::EvolvingAttention` node, or `EvolvingAttentionStart` at a start.
    """

    IDENTITY_TAP = (1, 1)  # (kernel row, column) through which a map passes unchanged: the centre

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        alpha: float = 0.5,
        beta: float = 1.0,
        negative_slope: float = 0.0,
        chain_start: bool = False,
        bias: bool = True,
        scale: float | None = None,
    ) -> None:
        super().__init__(embed_dim, num_heads, bias=bias, scale=scale)
        EvolvingConfig(alpha=alpha, beta=beta, negative_slope=negative_slope)  # validates
        self.alpha = float(alpha)
        self.beta = float(beta)
        self.negative_slope = float(negative_slope)
        self.is_chain_start = chain_start
        self.mix = 1.0  # share of alpha and beta in use: 0 after start_as_vanilla, 1 once trained
        if not chain_start:
            self.conv = nn.Conv2d(num_heads, num_heads, kernel_size=3, padding=1)

    @torch.no_grad()
    def start_as_vanilla(self) -> None:
        """α and β in use start at 0 (A = Z(S): vanilla attention, exactly) and the conv is the
        identity (each head's map through its own tap `IDENTITY_TAP`, no bias), so that as
        `set_warm_start_progress` brings α and β in, C = ReLU(A_in) departs from A_in only where
        logits are negative. α and β are the configured values once the progress reaches 1."""
        self.mix = 0.0
        if not self.is_chain_start:
            self.conv.weight.zero_()
            row, column = self.IDENTITY_TAP
            self.conv.weight[:, :, row, column].copy_(torch.eye(self.n_heads))
            self.conv.bias.zero_()

    def set_warm_start_progress(self, fraction: float) -> None:
        self.mix = min(1.0, max(0.0, float(fraction)))

    @property
    def warm_start_complete(self) -> bool:
        return self.mix >= 1.0

    @property
    def alpha_in_use(self) -> float:
        return self.mix * self.alpha

    @property
    def beta_in_use(self) -> float:
        return self.mix * self.beta

    def forward(
        self, x: Tensor, key_padding_mask: Tensor | None = None, prev_logits: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        mask = as_key_padding_mask(key_padding_mask, x)  # [B, T]
        q, k, v = self.project(x)  # [B, H, T, d]
        heads, logits = self.attend(q, k, v, mask, prev_logits)  # [B,H,T,d], [B,H,T,T]
        return self.merge(heads), logits

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, prev_logits: Tensor | None
    ) -> tuple[Tensor, Tensor]:
        if prev_logits is None:
            return call_op(reference.evolving_attention_start, q, k, v, mask, scale=self.scale)
        if self.is_chain_start:
            raise ConfigError(
                "this evolving attention layer was made with chain_start=True (no conv): call it "
                "with prev_logits=None, or make it with chain_start=False to continue a chain"
            )
        return call_op(
            reference.evolving_attention, q, k, v, mask, prev_logits,
            self.conv.weight, self.conv.bias,
            scale=self.scale, alpha=self.alpha_in_use, beta=self.beta_in_use,
            negative_slope=self.negative_slope,
        )

    @classmethod
    def from_config(cls, config, layer_index: int) -> EvolvingAttention:
        """Layer 0 of the encoder stack starts the chain (no conv), and so does every layer
        below `evolving_layers` (a converted Hugging Face model's option); every later one
        continues it."""
        evolving = config.evolving
        layer = cls(
            config.d_model, config.n_heads, alpha=evolving.alpha,
            beta=evolving.beta, negative_slope=evolving.negative_slope,
            chain_start=layer_index < evolving.chain_starts(config.n_layers),
        )
        layer.layer_index = layer_index
        return layer

    def forward_context(self, x: Tensor, context: LayerContext) -> LayerResult:
        if not self.is_chain_start and context.prev_logits is None:
            index = getattr(self, "layer_index", "?")
            raise ConfigError(
                f"evolving attention layer {index} needs the previous layer's logits"
            )
        prev = None if self.is_chain_start else context.prev_logits  # a start ignores the chain
        y, logits = self(x, context.key_padding_mask, prev)  # [B, T, D], [B, H, T, T]
        return LayerResult(y, logits)
