"""The attention of an image model's blocks: the variant's layer (`attndeploy.nn`) over the
positions of an image (ViT patches, an AA-CNN's grid cells), and GA-Net's gates over them.

Letters: B batch, T positions, D attention width. An image has no padding: every position is
real, so the key padding mask is all true and built inside the model (the export's only input is
the image). GA-Net: one gate network over the first attention block's input decides which
positions every layer attends to (its `gates` output); in training its relaxed gates carry a
density penalty. With `ganet_budget` b, every image keeps its ceil(b T) positions of largest
logit instead, queries and keys (`BudgetGatedAttention`; the rest skip the attention
sub-layer): the logits carry no training noise, so training computes the function inference
does, and there is no penalty (the density is b). Evolving Attention: the first layer starts
the chain, each later one convolves the maps A^{l-1} [B, H, T, T] it is handed, as images
(heads as channels).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attndeploy.models.vision.config import ImageModelConfig
from attndeploy.nn import (
    BudgetGatedAttention,
    EvolvingAttention,
    GatedAttention,
    GateNetwork,
    QVIAttention,
    StandardAttention,
    soft_density,
)
from attndeploy.variants.api import LayerContext

GATE_BIAS = 1.0  # gate networks start with every position open (logit 1 > 0)


def attention_layer(config: ImageModelConfig, index: int) -> nn.Module:
    """The variant's self-attention layer for the `index`-th attention block (D -> D)."""
    d, h = config.d_model, config.n_heads
    if config.variant == "qvi":
        return QVIAttention(d, h, form=config.qvi_form)
    if config.variant == "ganet" and config.ganet_budget is not None:
        return BudgetGatedAttention(d, h, budget=config.ganet_budget,
                                    temperature=config.ganet_temperature)
    if config.variant == "ganet":
        return GatedAttention(d, h, temperature=config.ganet_temperature,
                              gather_open_keys=config.ganet_gather_open_keys)
    if config.variant == "evolving":
        return EvolvingAttention(d, h, alpha=config.evolving_alpha, beta=config.evolving_beta,
                                 negative_slope=config.evolving_negative_slope,
                                 chain_start=index == 0)
    return StandardAttention(d, h)


def all_positions(x: Tensor) -> Tensor:
    """The key padding mask of x [B, T, D]: bool [B, T], all true (an image has no pads)."""
    return torch.ones(x.shape[0], x.shape[1], dtype=torch.bool, device=x.device)


class PositionGates(nn.Module):
    """GA-Net's gates over positions: x [B, T, E] -> the layers' context (decision logits:
    s, plus logistic noise in training) and, in training, the density penalty R of the relaxed
    gates σ(logits / τ). With a budget: the logits s alone (no noise, no penalty)."""

    def __init__(self, config: ImageModelConfig, embed_dim: int) -> None:
        super().__init__()
        self.budgeted = config.ganet_budget is not None
        self.network = GateNetwork(embed_dim, kind="mlp", hidden=config.ganet_aux_hidden,
                                   bias_init=GATE_BIAS, sample_in_training=not self.budgeted)
        self.temperature = config.ganet_temperature

    def forward(self, x: Tensor, mask: Tensor) -> tuple[LayerContext, Tensor | None]:
        decision = self.network(x, mask)  # [B, T]
        density = (soft_density(torch.sigmoid(decision / self.temperature), mask)
                   if self.training and not self.budgeted else None)
        return LayerContext(mask, gate_logits=decision), density


class Chain:
    """What one forward pass hands from attention layer to attention layer: the context
    (mask, GA-Net's decision logits, Evolving Attention's previous maps) and the gates the
    layers applied (GA-Net)."""

    def __init__(self, context: LayerContext) -> None:
        self.context = context
        self.gates: Tensor | None = None

    def attend(self, layer: nn.Module, x: Tensor) -> Tensor:
        """layer(x [B, T, D]) -> [B, T, D]; the context moves on (Evolving: its maps)."""
        result = layer.forward_context(x, self.context)
        if result.logits is not None:
            self.context = self.context.with_prev_logits(result.logits)  # [B, H, T, T]
        if result.gates is not None:
            self.gates = result.gates  # [B, T], the same in every layer
        return result.output


def start_chain(gates: PositionGates | None, x: Tensor) -> tuple[Chain, Tensor | None]:
    """The chain of one forward pass whose positions are x [B, T, E] (all real; GA-Net's gate
    network reads them) and, for GA-Net in training, its density penalty."""
    mask = all_positions(x)  # [B, T]
    if gates is None:
        return Chain(LayerContext(mask)), None
    context, density = gates(x, mask)
    return Chain(context), density


def model_outputs(logits: Tensor, chain: Chain | None, density: Tensor | None,
                  details: bool) -> dict[str, Tensor]:
    """`logits` [B, C]; GA-Net's `gates` bool [B, T]; with `details`, the density penalty."""
    out = {"logits": logits}
    if chain is not None and chain.gates is not None:
        out["gates"] = chain.gates
    if details and density is not None:
        out["density_penalty"] = density
    return out
