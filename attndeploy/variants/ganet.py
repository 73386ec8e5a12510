"""GA-Net: gated attention (variants.md §3). Letters: b batch, h heads, i/j query/key, t token.

One auxiliary network per model reads the token embeddings and scores every token (gate logits
s [B, T]). Training uses relaxed Gumbel-sigmoid gates in log space; eval mode uses hard gates
decided on the LOGITS (s > 0) with the all-closed rescue. Gates are per key position, shared by
every head, query and layer, and by the gated attention pooling of the classifier head.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attndeploy.config import GANetConfig, ModelConfig
from attndeploy.variants import dispatch
from attndeploy.variants._common import AttentionBase, LayerContext
from attndeploy.variants._recurrent import PaddedBiLSTM
from attndeploy.variants.functional import hard_gates, masked_softmax
from attndeploy.variants.registry import register_variant

NOISE_EPS = 1e-6


class GateNetwork(nn.Module):
    """Auxiliary network: token embeddings [B, T, E] -> gate logits s [B, T]."""

    def __init__(self, embed_dim: int, config: GANetConfig, lstm_hidden: int = 100) -> None:
        super().__init__()
        self.kind = config.aux
        hidden = config.aux_hidden
        if self.kind == "mlp":
            self.body = nn.Sequential(nn.Linear(embed_dim, hidden), nn.GELU())
            out_features = hidden
        elif self.kind == "conv":
            self.body = nn.Conv1d(embed_dim, hidden, kernel_size=3, padding=1)
            out_features = hidden
        else:
            self.body = PaddedBiLSTM(embed_dim, lstm_hidden, num_layers=1)
            out_features = 2 * lstm_hidden
        self.score = nn.Linear(out_features, 1)
        nn.init.constant_(self.score.bias, config.aux_bias_init)

    def forward(self, embeddings: Tensor, key_padding_mask: Tensor) -> Tensor:
        if self.kind == "mlp":
            features = self.body(embeddings)  # [B, T, a]
        elif self.kind == "conv":
            zeroed = embeddings * key_padding_mask[:, :, None].to(embeddings.dtype)  # pads = 0
            features = F.gelu(self.body(zeroed.transpose(1, 2)).transpose(1, 2))  # [B, T, a]
        else:
            features = self.body(embeddings, key_padding_mask)  # [B, T, 2h]
        return self.score(features).squeeze(-1)  # [B, T]


def logistic_noise(shape: torch.Size, *, like: Tensor, generator: torch.Generator | None) -> Tensor:
    """L = log U − log(1 − U), U ~ Uniform(eps, 1 − eps): one draw per token."""
    u = torch.rand(shape, generator=generator, device=like.device, dtype=torch.float32)
    u = u.clamp(NOISE_EPS, 1 - NOISE_EPS)
    return (torch.log(u) - torch.log1p(-u)).to(like.dtype)


@dataclass(frozen=True)
class GateState:
    """What the gates hand to the layers and the loss for one forward pass."""

    gate_logits: Tensor  # decision logits [B, T]: s (threshold) or s + L (sample / training)
    raw_logits: Tensor  # s [B, T], the auxiliary network's output
    log_gates: Tensor | None  # log g_soft [B, T] in training, None in eval
    soft_gates: Tensor | None  # g_soft [B, T] in training
    hard_gates: Tensor | None  # sampled hard gates for straight-through training


class GateController(nn.Module):
    """Owns the auxiliary network and turns its logits into this pass's gates."""

    def __init__(self, embed_dim: int, config: ModelConfig) -> None:
        super().__init__()
        self.config = config.ganet
        self.network = GateNetwork(embed_dim, config.ganet, config.lstm_hidden)
        self.generator: torch.Generator | None = None

    def forward(self, embeddings: Tensor, key_padding_mask: Tensor) -> GateState:
        s = self.network(embeddings, key_padding_mask)  # [B, T]
        if not self.training and self.config.gate_mode == "threshold":
            return GateState(s, s, None, None, None)  # consumes no randomness
        noisy = s + logistic_noise(s.shape, like=s, generator=self.generator)
        if not self.training:  # `sample` mode: g = (s + L > 0) ∧ m with the same rescue
            return GateState(noisy, s, None, None, None)
        relaxed = noisy / self.config.temperature
        hard = hard_gates(noisy, key_padding_mask) if self.config.straight_through else None
        return GateState(noisy, s, F.logsigmoid(relaxed), torch.sigmoid(relaxed), hard)

    def layer_context(self, state: GateState, key_padding_mask: Tensor) -> LayerContext:
        return LayerContext(
            key_padding_mask=key_padding_mask,
            gate_logits=state.gate_logits,
            log_gates=state.log_gates,
            hard_gates=state.hard_gates,
        )


def soft_density(soft_gates: Tensor, key_padding_mask: Tensor) -> Tensor:
    """R: mean over examples of the mean soft gate over valid tokens (variants.md §3.5)."""
    m = key_padding_mask.to(soft_gates.dtype)
    return ((soft_gates * m).sum(-1) / m.sum(-1).clamp(min=1)).mean()


def _relaxed_probs(scores: Tensor, context: LayerContext, broadcast: tuple) -> Tensor:
    """Training-time attention/pooling weights over keys (last axis of `scores`).

    Soft: softmax(scores + M + log g_soft). Straight-through: hard forward, soft backward.
    `broadcast` indexes a [B, T] tensor up to the rank of `scores`.
    """
    m = context.key_padding_mask[broadcast]
    log_gates = context.log_gates[broadcast]
    soft = masked_softmax(scores + log_gates.to(scores.dtype), m)
    if context.hard_gates is None:
        return soft
    hard = masked_softmax(scores, context.hard_gates[broadcast])
    # Forward: the hard weights; backward: the soft path only (variants.md §3.5 "backward through
    # the soft path"). Written as soft + stopgrad(hard - soft) so that no gradient reaches Q·Kᵀ
    # through the hard softmax as well (hard + soft - stopgrad(soft) would count it twice).
    return soft + (hard - soft).detach()


@register_variant("ganet")
class GatedSelfAttention(AttentionBase):
    """Self-attention whose keys are gated by the model's shared gates."""

    def __init__(self, config: ModelConfig, layer_index: int) -> None:
        super().__init__(config, layer_index)
        self.gather_open_keys = config.ganet.gather_open_keys

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, context: LayerContext
    ) -> tuple[Tensor, None]:
        if self.training:
            scores = self.scale * (q @ k.transpose(-2, -1))  # [B, H, Tq, Tk]
            probs = _relaxed_probs(scores, context, (slice(None), None, None, slice(None)))
            return probs @ v, None
        out, _ = dispatch.call(
            "gated_attention", q, k, v, context.key_padding_mask, context.gate_logits,
            scale=self.scale, gather_open_keys=self.gather_open_keys,
        )
        return out, None


def gated_pooling(
    values: Tensor, scores: Tensor, context: LayerContext, training: bool
) -> tuple[Tensor, Tensor | None]:
    """Gated additive attention pooling: values [B, T, D], scores [B, T] -> context [B, D].

    Training: relaxed gates (no gates returned). Eval: the GatedAttentionPooling op, which also
    returns the hard gates it applied.
    """
    if training:
        alpha = _relaxed_probs(scores, context, (slice(None), slice(None)))  # [B, T]
        return torch.einsum("bt,btd->bd", alpha, values), None
    return dispatch.call(
        "gated_attention_pooling", values, scores, context.key_padding_mask, context.gate_logits
    )
