"""`build_model(config)`: the image model a config describes."""

from __future__ import annotations

from torch import nn

from attndeploy.models.vision.aacnn import AttentionAugmentedCNN
from attndeploy.models.vision.config import ImageModelConfig
from attndeploy.models.vision.vit import VisionTransformer

MODELS = {"vit": VisionTransformer, "aacnn": AttentionAugmentedCNN}


def build_model(config: ImageModelConfig) -> nn.Module:
    """A fresh `VisionTransformer` or `AttentionAugmentedCNN` (train mode)."""
    return MODELS[config.architecture](config)
