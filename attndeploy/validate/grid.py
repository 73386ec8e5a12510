"""The (batch, seq) shapes a validation runs and the deterministic inputs for each.

Padding rule (right padding, docs/variants.md §1.2): a batch of one row is all real tokens; in a
batch of more rows, row 0 is full, row 1 has a single real token and the other rows have random
lengths in [1, seq]. So every multi-row shape with seq > 1 mixes padded and unpadded rows, and every
row has at least one real token (a row without one is invalid input).

Inputs are a function of (seed, batch, seq) only, so one shape gives the same tensors whatever
the grid around it: token ids of real tokens are drawn from [2, vocab) (0 is padding, 1 is kept
for unknown words by the tokenizer), padded positions hold id 0 and mask 0.

`--shapes` syntax: comma-separated `BATCHxSEQ`, e.g. "1x1,4x17,8x64".
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from attndeploy.errors import ValidationError
from attndeploy.interface import make_feed
from attndeploy.runtime.names import ATTENTION_MASK

FIRST_TOKEN_ID = 2  # ids 0 (padding) and 1 (unknown) are never drawn
_SHAPE = re.compile(r"^\s*(\d+)\s*[xX×]\s*(\d+)\s*$")


@dataclass(frozen=True, order=True)
class Shape:
    """One input shape: `batch` rows of `seq` positions."""

    batch: int
    seq: int

    def __post_init__(self) -> None:
        if self.batch < 1 or self.seq < 1:
            raise ValidationError(f"shape {self.batch}x{self.seq}: batch and seq must be >= 1")

    def __str__(self) -> str:
        return f"{self.batch}x{self.seq}"

    @property
    def padded(self) -> bool:
        return self.batch > 1 and self.seq > 1

    def lengths(self, seed: int = 0) -> tuple[int, ...]:
        """Real tokens per row (see the module docstring)."""
        if self.batch == 1:
            return (self.seq,)
        rng = np.random.default_rng([seed, self.batch, self.seq, 1])
        rest = rng.integers(1, self.seq + 1, size=self.batch - 2).tolist()
        return (self.seq, 1, *(int(n) for n in rest))


def parse_shapes(text: str) -> tuple[Shape, ...]:
    """Parse "1x1,4x17,8x64" (duplicates dropped, order kept)."""
    shapes: list[Shape] = []
    for part in text.split(","):
        if not part.strip():
            continue
        match = _SHAPE.match(part)
        if not match:
            raise ValidationError(
                f"cannot read shape {part.strip()!r}: expected BATCHxSEQ, e.g. '1x1,4x17,8x64'"
            )
        shape = Shape(int(match.group(1)), int(match.group(2)))
        if shape not in shapes:
            shapes.append(shape)
    if not shapes:
        raise ValidationError(f"no shapes in {text!r}: expected e.g. '1x1,4x17,8x64'")
    return tuple(shapes)


def as_shapes(value: str | Iterable[Shape | str | tuple[int, int]]) -> tuple[Shape, ...]:
    """Shapes from a `--shapes` string or a sequence of Shape / "BxS" / (batch, seq)."""
    if isinstance(value, str):
        return parse_shapes(value)
    shapes: list[Shape] = []
    for item in value:
        if isinstance(item, Shape):
            shape = item
        elif isinstance(item, str):
            (shape,) = parse_shapes(item)
        else:
            batch, seq = item
            shape = Shape(int(batch), int(seq))
        if shape not in shapes:
            shapes.append(shape)
    return tuple(shapes)


def default_grid(max_seq: int) -> tuple[Shape, ...]:
    """The default grid for a graph that accepts sequences up to `max_seq`.

    seq = 1 (alone and batched), odd sizes, mixed-padding batches, and the largest supported
    seq (alone and batched); sizes above `max_seq` are clipped, duplicates dropped.
    """
    wanted = [(1, 1), (3, 1), (1, 9), (2, 5), (4, 17), (3, 31), (8, 64), (1, max_seq),
              (2, max_seq)]
    return as_shapes((batch, min(seq, max_seq)) for batch, seq in wanted)


def default_reference_shapes(shapes: Iterable[Shape], limit: int = 4,
                             max_tokens: int = 48) -> tuple[Shape, ...]:
    """A small subset for the (slow) ONNX reference evaluator.

    The smallest shapes by batch·seq within `max_tokens`, always including a padded one when
    the grid has one.
    """
    ordered = sorted(shapes, key=lambda s: (s.batch * s.seq, s))
    small = [s for s in ordered if s.batch * s.seq <= max_tokens]
    chosen = small[:limit]
    if chosen and not any(s.padded for s in chosen):
        padded = next((s for s in small if s.padded), None)
        if padded is not None:
            chosen[-1] = padded
    return tuple(chosen)


def make_inputs(shape: Shape, vocab_size: int, seed: int = 0) -> dict[str, np.ndarray]:
    """The feed for one shape: int64 `input_ids` and `attention_mask` [batch, seq]."""
    if vocab_size <= FIRST_TOKEN_ID:
        raise ValidationError(f"vocab_size {vocab_size} leaves no token id >= {FIRST_TOKEN_ID}")
    rng = np.random.default_rng([seed, shape.batch, shape.seq])
    ids = rng.integers(FIRST_TOKEN_ID, vocab_size, size=(shape.batch, shape.seq))  # [B, T]
    lengths = np.array(shape.lengths(seed))  # [B]
    mask = np.arange(shape.seq)[None, :] < lengths[:, None]  # [B, T] bool
    ids = np.where(mask, ids, 0)
    return make_feed(ids, mask.astype(np.int64))


def valid_mask(feed: dict[str, np.ndarray]) -> np.ndarray:
    """bool [batch, seq]: the real tokens of a feed."""
    return np.asarray(feed[ATTENTION_MASK]) != 0


def check_shapes(shapes: Iterable[Shape], max_seq: int, where: str) -> None:
    """Refuse, before running anything, shapes whose seq exceeds the graph's limit."""
    too_long = [str(s) for s in shapes if s.seq > max_seq]
    if too_long:
        raise ValidationError(
            f"shape(s) {', '.join(too_long)} exceed the maximum sequence length {max_seq} of "
            f"{where}; choose seq <= {max_seq}"
        )
