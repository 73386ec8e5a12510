"""Classifier pooling shared by the model families: additive attention pooling.

e_t = vᵀ tanh(W h_t + b); alpha = softmax_t(e_t + M_t [+ log gates]); c = Σ_t alpha_t h_t.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attndeploy.variants.api import LayerContext, gated_pooling
from attndeploy.variants.functional import masked_softmax


class AdditiveScorer(nn.Module):
    """h [B, T, D] -> e [B, T]."""

    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.project = nn.Linear(width, hidden)
        self.v = nn.Linear(hidden, 1, bias=False)

    def forward(self, h: Tensor) -> Tensor:
        return self.v(torch.tanh(self.project(h))).squeeze(-1)  # [B, T]


class PoolingClassifier(nn.Module):
    """Additive attention pooling then a linear layer; gated when the model is GA-Net."""

    def __init__(self, width: int, hidden: int, num_labels: int, gated: bool) -> None:
        super().__init__()
        self.scorer = AdditiveScorer(width, hidden)
        self.classify = nn.Linear(width, num_labels)
        self.gated = gated

    def forward(self, h: Tensor, context: LayerContext) -> tuple[Tensor, Tensor | None]:
        scores = self.scorer(h)  # [B, T]
        if self.gated:
            pooled, gates = gated_pooling(h, scores, context, self.training)  # [B, D]
        else:
            alpha = masked_softmax(scores, context.key_padding_mask)  # [B, T]
            pooled, gates = torch.einsum("bt,btd->bd", alpha, h), None
        return self.classify(pooled), gates  # [B, C]
