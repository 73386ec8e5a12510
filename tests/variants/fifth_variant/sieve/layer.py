"""The `sieve` gate machinery and layer (its op's reference is `reference.py`). Letters: b h t d
as in `_common`.

Gates: s = w·tanh(W e_t) + b per token [B, T]; training weighs key t by σ(s_t / τ) (in log space,
added to the scores); eval keeps the keys whose hard gate is open (s > 0, with the rescue).
"""
# ruff: noqa: I001  (here `attndeploy.variants.sieve` does not exist; ruff sorts it as third-party)

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attndeploy.variants.api import (
    AttentionBase,
    GateState,
    LayerContext,
    LayerResult,
    as_key_padding_mask,
    call_op,
)
from attndeploy.variants.functional import masked_softmax
from attndeploy.variants.sieve.reference import sieve_attention


class SieveGates(nn.Module):
    """The model's gates: one scorer over the token embeddings, shared by every layer."""

    def __init__(self, embed_dim: int, config) -> None:  # a ModelConfig
        super().__init__()
        self.temperature = config.sieve.temperature
        self.body = nn.Linear(embed_dim, config.sieve.hidden)
        self.score = nn.Linear(config.sieve.hidden, 1)
        with torch.no_grad():
            self.score.bias.fill_(config.sieve.bias_init)

    def scores(self, embeddings: Tensor, key_padding_mask: Tensor) -> Tensor:
        return self.score(torch.tanh(self.body(embeddings))).squeeze(-1)  # [B, T]

    @torch.no_grad()
    def shift_threshold(self, shift: float) -> None:
        self.score.bias.add_(shift)

    @torch.no_grad()
    def start_open(self, logit: float = 4.0) -> None:
        """Every gate open (s = `logit` for every token): a converted pretrained model's warm
        start, which then computes what the model computed."""
        self.score.weight.zero_()
        self.score.bias.fill_(logit)

    def forward(self, embeddings: Tensor, key_padding_mask: Tensor) -> GateState:
        s = self.scores(embeddings, key_padding_mask)  # [B, T]
        if not self.training:
            return GateState(s, s, None, None, None)
        return GateState(s, s, F.logsigmoid(s / self.temperature),
                         torch.sigmoid(s / self.temperature), None)

    def layer_context(self, state: GateState, key_padding_mask: Tensor) -> LayerContext:
        return LayerContext(key_padding_mask, gate_logits=state.gate_logits,
                            log_gates=state.log_gates)


class SieveAttention(AttentionBase):
    def forward(self, x: Tensor, key_padding_mask: Tensor | None, gate_logits: Tensor,
                log_gates: Tensor | None = None) -> Tensor:
        mask = as_key_padding_mask(key_padding_mask, x)  # [B, T]
        q, k, v = self.project(x)  # [B, H, T, d]
        if self.training and log_gates is not None:  # soft gates, in log space
            scores = self.scale * (q @ k.transpose(-2, -1)) + log_gates[:, None, None, :]
            heads = masked_softmax(scores, mask[:, None, None, :]) @ v  # [B, H, T, d]
        else:
            heads = call_op(sieve_attention, q, k, v, mask, gate_logits, scale=self.scale)
        return self.merge(heads)  # [B, T, D]

    @classmethod
    def from_config(cls, config, layer_index: int) -> SieveAttention:
        return cls(config.d_model, config.n_heads)

    def forward_context(self, x: Tensor, context: LayerContext) -> LayerResult:
        return LayerResult(self(x, context.key_padding_mask, context.gate_logits,
                                context.log_gates))
