"""Factories for `--model tests.cli.user_models:<name>`: a model that is NOT a text classifier
(float features [B, T, F] and a padding mask in; a pooled regression [B, 2] and per-token
states [B, T, 8] out) and the broken factories of the bad-input table."""

from __future__ import annotations

import torch
from torch import nn

from attndeploy.nn import EvolvingAttention

FEATURES = 3


class Regressor(nn.Module):
    """features [B, T, F] -> evolving attention -> masked mean -> 2 values; states [B, T, 8]."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(FEATURES, 8)
        self.attention = EvolvingAttention(8, 2, chain_start=True)
        self.head = nn.Linear(8, 2)

    def forward(self, features: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
        x = self.proj(features)  # [B, T, 8]
        states, _ = self.attention(x, mask, None)  # [B, T, 8]
        real = mask[..., None].float()  # [B, T, 1]
        pooled = (states * real).sum(1) / real.sum(1)  # [B, 8]
        return {"value": self.head(pooled), "states": states}


def example_inputs() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    mask = torch.ones(2, 5, dtype=torch.bool)  # [B, T]
    mask[1, 3:] = False  # right padding
    return {"features": torch.randn(2, 5, FEATURES, generator=generator), "mask": mask}


DYNAMIC = {"features": {0: "batch", 1: "seq"}, "mask": {0: "batch", 1: "seq"}}


def build():
    torch.manual_seed(0)  # fresh weights: --weights must be what makes two runs agree
    return Regressor(), example_inputs(), DYNAMIC


def build_static():
    return Regressor(), example_inputs()


def raises():
    raise RuntimeError("no GPU here")


def returns_module_only():
    return Regressor()


def returns_not_a_module():
    return "model", example_inputs()


def returns_bad_inputs():
    return Regressor(), [torch.zeros(2, 5, FEATURES)]


def returns_bad_dynamic():
    return Regressor(), example_inputs(), {"features": ["batch"]}


def fails_forward():
    return Regressor(), {"features": torch.zeros(2, 5, FEATURES)}  # mask missing


not_callable = 3
