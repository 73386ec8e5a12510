"""`AttentionAugmentedCNN`: convolution features concatenated with multi-head attention over
spatial positions, as in AA-ResNet (Bello et al. 2019), with any variant (docs/images.md).

Letters: B batch, C channels, H height, W width, c `conv_channels`, w = 2c the augmented
layers' width, D = `d_model` attention's share of it, T = (H/4)(W/4) grid cells.

    pixel_values [B, C, H, W]
      -> conv3x3 C->c, BN, ReLU; conv3x3 c->c, BN, ReLU; max-pool 2     [B, c, H/2, W/2]
      -> conv3x3 c->w, BN, ReLU; max-pool 2                             [B, w, H/4, W/4]
      -> n_layers augmented layers, each x += ReLU(BN(concat(
             conv3x3 w->(w-D) (x),                                       [B, w-D, H/4, W/4]
             attention over the T cells of Linear w->D (x) + positions   [B, D, H/4, W/4])))
      -> global average pool [B, w] -> Linear -> logits [B, classes]

Every augmented layer works on the same grid, so Evolving Attention's maps [B, H, T, T] chain
through all of them (EA-AA-ResNet; its code restarts a chain where the grid changes). GA-Net's
gate network reads the grid cells entering the first augmented layer and gates which cells every
layer attends to. Without attention (`attention=False`) an augmented layer is a conv of the full
width w: the same network, attention removed.
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


def conv_bn_relu(inputs: int, outputs: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(inputs, outputs, 3, padding=1, bias=False),
                         nn.BatchNorm2d(outputs), nn.ReLU())


def cells(x: Tensor) -> Tensor:
    """[B, w, h, v] -> the grid cells as tokens [B, h*v, w]."""
    return x.flatten(2).transpose(1, 2)


class AugmentedConv(nn.Module):
    """One layer: x [B, w, h, v] -> x + ReLU(BN(concat(conv(x), attention(x))))."""

    def __init__(self, config: ImageModelConfig, index: int) -> None:
        super().__init__()
        width = 2 * config.conv_channels
        attention_width = config.d_model if config.attention else 0
        self.conv = nn.Conv2d(width, width - attention_width, 3, padding=1, bias=False)
        if config.attention:
            self.project = nn.Linear(width, attention_width)
            self.positions = nn.Parameter(torch.randn(config.positions, attention_width) * 0.02)
            self.attention = attention_layer(config, index)
        else:
            self.attention = None
        self.norm = nn.BatchNorm2d(width)
        self.dropout = nn.Dropout2d(config.dropout)

    def forward(self, x: Tensor, chain: Chain | None) -> Tensor:
        features = self.conv(x)  # [B, w-D, h, v]
        if self.attention is not None and chain is not None:
            batch, _, height, width = x.shape
            tokens = self.project(cells(x)) + self.positions[None]  # [B, T, D]
            attended = chain.attend(self.attention, tokens)  # [B, T, D]
            grid = attended.transpose(1, 2).reshape(batch, -1, height, width)  # [B, D, h, v]
            features = torch.cat([features, grid], dim=1)  # [B, w, h, v]
        return x + self.dropout(torch.relu(self.norm(features)))


class AttentionAugmentedCNN(nn.Module):
    """The model of the module docstring; forward(pixel_values) -> {"logits", ["gates"]}."""

    def __init__(self, config: ImageModelConfig) -> None:
        super().__init__()
        if config.architecture != "aacnn":
            raise ValueError(f"not an AA-CNN config: {config.architecture}")
        self.config = config
        c = config.conv_channels
        self.stem = nn.Sequential(conv_bn_relu(config.channels, c), conv_bn_relu(c, c),
                                  nn.MaxPool2d(2), conv_bn_relu(c, 2 * c), nn.MaxPool2d(2))
        self.gates = (PositionGates(config, 2 * c)
                      if config.attention and config.variant == "ganet" else None)
        self.layers = nn.ModuleList(AugmentedConv(config, i) for i in range(config.n_layers))
        self.classifier = nn.Linear(2 * c, config.num_labels)

    def forward(self, pixel_values: Tensor, *, details: bool = False) -> dict[str, Tensor]:
        x = self.stem(pixel_values)  # [B, w, H/4, W/4]
        chain, density = (start_chain(self.gates, cells(x)) if self.config.attention
                          else (None, None))
        for layer in self.layers:
            x = layer(x, chain)
        pooled = x.mean(dim=(2, 3))  # [B, w]
        return model_outputs(self.classifier(pooled), chain, density, details)
