# my_models.py
import torch
from torch import nn

from attndeploy.nn import EvolvingAttention


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj, self.head = nn.Linear(3, 8), nn.Linear(8, 2)
        self.attention = EvolvingAttention(8, 2, chain_start=True)

    def forward(self, features, mask):  # [B, T, 3] float, [B, T] bool
        states, _ = self.attention(self.proj(features), mask, None)  # [B, T, 8]
        real = mask[..., None].float()
        return {"value": self.head((states * real).sum(1) / real.sum(1)), "states": states}


def build():
    inputs = {"features": torch.randn(2, 5, 3), "mask": torch.ones(2, 5, dtype=torch.bool)}
    dynamic = {"features": {0: "batch", 1: "seq"}, "mask": {0: "batch", 1: "seq"}}
    return Regressor(), inputs, dynamic
