"""Model families built from the attention variants."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from attndeploy.config import ModelConfig
from attndeploy.models.base import AttnModel
from attndeploy.models.bilstm import BiLSTMModel
from attndeploy.models.transformer import TransformerModel

_FAMILIES: dict[str, type[AttnModel]] = {"transformer": TransformerModel, "bilstm": BiLSTMModel}


def build_model(config: ModelConfig, label_names: Sequence[str] | None = None) -> AttnModel:
    """A freshly initialised model for `config` (train mode, as nn.Module defaults). With its
    label names, what the head derives from them is set too (its family's optional
    `name_labels(head, config, label_names)` hook: a CRF's scheme constraint); training and
    loading a checkpoint pass them."""
    model = _FAMILIES[config.family](config)
    name_labels = getattr(model.family_part, "name_labels", None)
    if label_names is not None and name_labels is not None:
        name_labels(model.head, config, tuple(label_names))
    return model


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


__all__ = ["AttnModel", "BiLSTMModel", "TransformerModel", "build_model", "count_parameters"]
