"""A padding-aware bidirectional LSTM made of unidirectional LSTM runs (exports as ONNX `LSTM`).

Letters: b batch, t position, f features, h hidden. Instead of packed sequences, the backward
direction reverses each sequence within its own length, runs a forward LSTM and reverses back, so
that under right padding the states of real tokens never depend on the padding.

Every direction run goes through `run_lstm(lstm, x)`: `nn.LSTM` itself in training and eager
evaluation; inside `override_lstm(runner)` (entered by the exporter) the runner instead, e.g. a
torch custom op that becomes one ONNX `LSTM` node with symbolic batch and seq (torch.export would
unroll `nn.LSTM` and pin seq).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

# (lstm module, x [B, T, F]) -> outputs [B, T, h]: zero initial state, batch first.
LSTMRunner = Callable[[nn.LSTM, Tensor], Tensor]
_runner: LSTMRunner | None = None


def run_lstm(lstm: nn.LSTM, x: Tensor) -> Tensor:
    """One unidirectional run of `lstm` over x [B, T, F] -> [B, T, h] (the override if any)."""
    if _runner is not None:
        return _runner(lstm, x)
    outputs, _ = lstm(x)
    return outputs  # [B, T, h]


@contextmanager
def override_lstm(runner: LSTMRunner) -> Iterator[None]:
    """Within the block, every `run_lstm` call runs `runner(lstm, x)` instead of `lstm(x)`."""
    global _runner
    saved = _runner
    _runner = runner
    try:
        yield
    finally:
        _runner = saved


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
            ahead = run_lstm(forward_lstm, x)  # [B, T, h]
            behind = run_lstm(backward_lstm, reverse_within_length(x, lengths))  # [B, T, h]
            x = torch.cat([ahead, reverse_within_length(behind, lengths)], dim=-1)  # [B,T,2h]
        return x
