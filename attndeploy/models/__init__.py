"""Model families built from the attention variants."""

from __future__ import annotations

from torch import nn

from attndeploy.config import ModelConfig
from attndeploy.models.base import AttnModel
from attndeploy.models.bilstm import BiLSTMModel
from attndeploy.models.transformer import TransformerModel

_FAMILIES: dict[str, type[AttnModel]] = {"transformer": TransformerModel, "bilstm": BiLSTMModel}


def build_model(config: ModelConfig) -> AttnModel:
    """A freshly initialised model for `config` (train mode, as nn.Module defaults)."""
    return _FAMILIES[config.family](config)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


__all__ = ["AttnModel", "BiLSTMModel", "TransformerModel", "build_model", "count_parameters"]
