"""What every gated variant shares: the gate state, the density, the gated pooling.

Letters: b batch, t token (key position), d model dim. A gated variant (one whose spec lists the
`gates` output) brings its own gate machinery (`VariantSpec.gating`, e.g. GA-Net's
`GateController`): an `nn.Module` built as `Machinery(embed_dim, model_config)` that

    forward(embeddings [B,T,D], key_padding_mask [B,T]) -> GateState   once per forward pass
    layer_context(state, key_padding_mask) -> LayerContext              handed to every layer
    scores(embeddings, key_padding_mask) -> s [B,T]                     the noise-free logits
    shift_threshold(shift)                                              s -> s + shift for good

Gates are decided on logits: open where the decision logit > 0, with the all-closed rescue
(`functional.hard_gates`), in PyTorch as in the exported graph. The built-in models then pool
the classifier head over open tokens (`gated_pooling`, the `GatedAttentionPooling` op) and, in
training, add the soft density (`soft_density`) with the weight the variant's `TrainingHooks`
give, which `attndeploy.training.density` steers towards a target.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from attndeploy.variants import functional
from attndeploy.variants._common import LayerContext, call_op
from attndeploy.variants.functional import masked_softmax


@dataclass(frozen=True)
class GateState:
    """What the gates hand to the layers and the loss for one forward pass."""

    gate_logits: Tensor  # decision logits [B, T]: s (threshold) or s + L (sample / training)
    raw_logits: Tensor  # s [B, T], the gate network's output
    log_gates: Tensor | None  # log g_soft [B, T] in training, None in eval
    soft_gates: Tensor | None  # g_soft [B, T] in training
    hard_gates: Tensor | None  # sampled hard gates for straight-through training


def soft_density(soft_gates: Tensor, key_padding_mask: Tensor) -> Tensor:
    """R: mean over examples of the mean soft gate over valid tokens (docs/variants.md §3.5)."""
    m = key_padding_mask.to(soft_gates.dtype)
    return ((soft_gates * m).sum(-1) / m.sum(-1).clamp(min=1)).mean()


def relaxed_probs(scores: Tensor, context: LayerContext, broadcast: tuple) -> Tensor:
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
    # Forward: the hard weights; backward: the soft path only (docs/variants.md §3.5 "backward
    # through the soft path"). Written as soft + stopgrad(hard - soft) so that no gradient reaches
    # Q·Kᵀ through the hard softmax as well (hard + soft - stopgrad(soft) would count it twice).
    return soft + (hard - soft).detach()


def gated_pooling(
    values: Tensor, scores: Tensor, context: LayerContext, training: bool
) -> tuple[Tensor, Tensor | None]:
    """Gated additive attention pooling: values [B, T, D], scores [B, T] -> context [B, D].

    Training: relaxed gates (no gates returned). Eval: the GatedAttentionPooling op, which also
    returns the hard gates it applied.
    """
    if training:
        alpha = relaxed_probs(scores, context, (slice(None), slice(None)))  # [B, T]
        return torch.einsum("bt,btd->bd", alpha, values), None  # [B, D]
    return call_op(
        functional.gated_attention_pooling, values, scores, context.key_padding_mask,
        context.gate_logits,
    )
