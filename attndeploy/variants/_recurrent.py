"""A padding-aware bidirectional LSTM made of standard LSTMs (exports as ONNX `LSTM`).

Letters: b batch, t position, f features. Instead of packed sequences, the backward direction
reverses each sequence within its own length, runs a forward LSTM and reverses back, so that under
right padding the states of real tokens never depend on the padding.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def reverse_within_length(x: Tensor, lengths: Tensor) -> Tensor:
    """x [B, T, F]: reverse positions 0..len_b-1 of each row, keep the padding in place."""
    positions = torch.arange(x.shape[1], device=x.device)[None, :]  # [1, T]
    last = lengths[:, None] - 1  # [B, 1]
    index = torch.where(positions <= last, last - positions, positions)  # [B, T]
    return torch.gather(x, 1, index[:, :, None].expand_as(x))  # [B, T, F]


class PaddedBiLSTM(nn.Module):
    """Stacked BiLSTM over right-padded input: [B, T, F] -> [B, T, 2·hidden]."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1) -> None:
        super().__init__()
        sizes = [input_size] + [2 * hidden_size] * (num_layers - 1)
        self.forward_layers = nn.ModuleList(
            nn.LSTM(size, hidden_size, batch_first=True) for size in sizes
        )
        self.backward_layers = nn.ModuleList(
            nn.LSTM(size, hidden_size, batch_first=True) for size in sizes
        )

    def forward(self, x: Tensor, key_padding_mask: Tensor) -> Tensor:
        lengths = key_padding_mask.long().sum(-1).clamp(min=1)  # [B]
        layers = zip(self.forward_layers, self.backward_layers, strict=True)
        for forward_lstm, backward_lstm in layers:
            ahead, _ = forward_lstm(x)  # [B, T, hidden]
            behind, _ = backward_lstm(reverse_within_length(x, lengths))  # [B, T, hidden]
            x = torch.cat([ahead, reverse_within_length(behind, lengths)], dim=-1)  # [B,T,2h]
        return x
