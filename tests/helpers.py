"""Helpers shared by the contract tests: masks, token batches, an independent vanilla attention.

Nothing here calls `attndeploy.variants.functional`: these are the tests' own references.
Letters: b batch, h heads, i/j query/key positions, d head dim.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from tests.cases import FP32_TOLERANCE, TINY_VOCAB


def lengths_mask(lengths: Sequence[int], width: int | None = None) -> Tensor:
    """Right-padded key_padding_mask bool [B, T] (True = real token)."""
    width = max(lengths) if width is None else width
    return torch.arange(width)[None, :] < torch.tensor(list(lengths))[:, None]


def token_batch(
    lengths: Sequence[int],
    width: int | None = None,
    *,
    vocab_size: int = TINY_VOCAB,
    seed: int = 0,
) -> tuple[Tensor, Tensor]:
    """(input_ids, attention_mask) int64 [B, T], right-padded with id 0 and mask 0."""
    mask = lengths_mask(lengths, width)
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab_size, mask.shape, generator=generator)
    return torch.where(mask, ids, torch.zeros_like(ids)), mask.long()


def randn(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def qkv(
    batch: int, heads: int, t: int, d: int, *, seed: int = 0, dtype: torch.dtype = torch.float32
) -> tuple[Tensor, Tensor, Tensor]:
    """Random query, key, value [B, H, T, d]."""
    generator = torch.Generator().manual_seed(seed)
    return tuple(  # type: ignore[return-value]
        torch.randn(batch, heads, t, d, generator=generator, dtype=dtype) for _ in range(3)
    )


def qvi_weights(heads: int, d: int, *, seed: int = 1, pooled: bool = True) -> list[Tensor]:
    """u_weight, u_bias, w_weight, w_bias, gate_value_weight, gate_interaction_weight, gate_bias
    (+ pool_weight), random and small."""
    shapes = [(heads, d, d), (heads, d), (heads, d, d), (heads, d), (heads, d, d), (heads, d, d),
              (heads, d)] + ([(heads, d)] if pooled else [])
    return [0.5 * randn(*shape, seed=seed + i) for i, shape in enumerate(shapes)]


def vanilla_attention(
    q: Tensor, k: Tensor, v: Tensor, key_allowed: Tensor, scale: float | None = None
) -> Tensor:
    """softmax(S + M) V with M = -inf where a key is not allowed (bool [B, Tk]); [B, H, Tq, d].

    Written independently of the library: masked_fill with -inf, softmax, matmul. Rows without
    an allowed key give NaN here, so callers only use it where every row has one.
    """
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = scale * (q @ k.transpose(-2, -1))  # [B, H, Tq, Tk]
    scores = scores.masked_fill(~key_allowed[:, None, None, :], float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def valid_rows(x: Tensor, mask: Tensor) -> Tensor:
    """x [B, H, T, ...] -> its rows at real positions, [N_real, H, ...]."""
    return x.transpose(1, 2)[mask]


def assert_close(
    actual: Tensor, expected: Tensor, tolerance: tuple[float, float] = FP32_TOLERANCE
) -> None:
    """Polygraphy's rule: an element fails only if |a-b| > atol AND |a-b| > rtol·|b|."""
    atol, rtol = tolerance
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert torch.isfinite(actual).all(), "actual holds non-finite values"
    diff = (actual.double() - expected.double()).abs()
    bad = (diff > atol) & (diff > rtol * expected.double().abs())
    assert not bad.any(), (
        f"{int(bad.sum())} of {bad.numel()} elements differ; max abs diff {float(diff.max()):.3g}"
    )


def assert_close_valid(
    actual: Tensor, expected: Tensor, mask: Tensor,
    tolerance: tuple[float, float] = FP32_TOLERANCE,
) -> None:
    """Compare [B, H, T, d] tensors at real query positions only (pads carry no meaning)."""
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert_close(valid_rows(actual, mask), valid_rows(expected, mask), tolerance)


def threshold_below_median(logits: Tensor) -> Tensor:
    """A gate threshold that closes about half of `logits` (any shape) and lies clear of every
    one: the midpoint of the widest gap between neighbouring sorted logits in the middle third.
    Shifting a gate bias by the median itself puts that token's logit at 0 up to rounding, where
    PyTorch and onnxruntime can decide differently (docs/variants.md §3.6)."""
    values = logits.flatten().sort().values  # [n]
    n = values.numel()
    first, last = max(1, n // 3), max(1, min(n - 1, (2 * n) // 3))  # split before index i
    gaps = values[first:last + 1] - values[first - 1:last]  # [last - first + 1]
    split = first + int(gaps.argmax())
    assert gaps.max() > 1e-5, f"gate logits too close to place a clear threshold: {gaps.max()}"
    return (values[split - 1] + values[split]) / 2
