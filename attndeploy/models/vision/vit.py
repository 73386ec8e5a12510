"""`VisionTransformer`: a small ViT with any variant (docs/images.md).

Letters: B batch, C channels, H height, W width, P patch side, T = (H/P)(W/P) patches, D width.

    pixel_values [B, C, H, W] -> Conv2d(C, D, P, stride P) -> [B, D, H/P, W/P]
      -> flatten -> tokens [B, T, D] + learned positions [T, D]
      -> n_layers pre-norm blocks: h += attention(LN(h)); h += MLP(LN(h))
      -> LN -> mean over the patches [B, D] -> Linear -> logits [B, C]

GA-Net's gate network reads the tokens with their positions (where a patch is says as much as
what it holds); its gates decide which patches every layer attends to. Evolving Attention
chains the patch-attention maps [B, H, T, T] through the blocks. Without attention
(`attention=False`) a block is only its MLP: every patch is processed alone until the pooling.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attndeploy.models.vision.attention import (
    Chain,
    PositionGates,
    attention_layer,
    model_outputs,
    start_chain,
)
from attndeploy.models.vision.config import ImageModelConfig


class ViTBlock(nn.Module):
    def __init__(self, config: ImageModelConfig, index: int) -> None:
        super().__init__()
        d = config.d_model
        self.norm_attention = nn.LayerNorm(d) if config.attention else None
        self.attention = attention_layer(config, index) if config.attention else None
        self.norm_mlp = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, config.d_ff), nn.GELU(),
                                 nn.Linear(config.d_ff, d))
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, h: Tensor, chain: Chain | None) -> Tensor:
        if self.attention is not None and chain is not None:
            h = h + self.dropout(chain.attend(self.attention, self.norm_attention(h)))
        return h + self.dropout(self.mlp(self.norm_mlp(h)))  # [B, T, D]


class VisionTransformer(nn.Module):
    """The model of the module docstring; forward(pixel_values) -> {"logits", ["gates"]}."""

    def __init__(self, config: ImageModelConfig) -> None:
        super().__init__()
        if config.architecture != "vit":
            raise ValueError(f"not a ViT config: {config.architecture}")
        self.config = config
        d, p = config.d_model, config.patch_size
        self.patches = nn.Conv2d(config.channels, d, kernel_size=p, stride=p)
        self.positions = nn.Parameter(torch.randn(config.positions, d) * 0.02)  # [T, D]
        self.gates = (PositionGates(config, d)
                      if config.attention and config.variant == "ganet" else None)
        self.blocks = nn.ModuleList(ViTBlock(config, i) for i in range(config.n_layers))
        self.norm = nn.LayerNorm(d)
        self.classifier = nn.Linear(d, config.num_labels)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, pixel_values: Tensor, *, details: bool = False) -> dict[str, Tensor]:
        grid = self.patches(pixel_values)  # [B, D, H/P, W/P]
        tokens = grid.flatten(2).transpose(1, 2)  # [B, T, D]
        h = self.dropout(tokens + self.positions[None])  # [B, T, D]
        chain, density = start_chain(self.gates, h) if self.config.attention else (None, None)
        for block in self.blocks:
            h = block(h, chain)
        pooled = self.norm(h).mean(dim=1)  # [B, D]
        return model_outputs(self.classifier(pooled), chain, density, details)
