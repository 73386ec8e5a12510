"""The word tokenizer, with the torch tensors training uses.

The tokenizer itself (vocabulary, `tokenize`, `encode`, `decode`, the 100-character token limit)
lives in `attndeploy.runtime.tokenizer`, which imports no torch, so that in-process inference and
`attndeploy infer` share it. This module re-exports it and makes `encode_batch` and `pad_batch`
return torch tensors, as the datasets and the training loop expect.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from attndeploy.errors import DataError
from attndeploy.runtime.tokenizer import MAX_TOKEN_CHARS, pad_sequences
from attndeploy.runtime.tokenizer import CharTokenizer as _CharTokenizer
from attndeploy.runtime.tokenizer import SpaceTokenizer as _SpaceTokenizer
from attndeploy.runtime.tokenizer import WordTokenizer as _WordTokenizer

__all__ = ["MAX_TOKEN_CHARS", "CharTokenizer", "SpaceTokenizer", "WordTokenizer", "pad_batch",
           "tokenizer_from_dict"]


def pad_batch(sequences: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad id lists to the longest one: (input_ids, attention_mask), both int64 [N, T].

    Every sequence must hold at least one id (an all-pad row is invalid input, docs/variants.md
    §1.2); callers check that first so that their error can name the text.
    """
    input_ids, attention_mask = pad_sequences(sequences)
    return torch.from_numpy(input_ids), torch.from_numpy(attention_mask)


class WordTokenizer(_WordTokenizer):
    """`attndeploy.runtime.tokenizer.WordTokenizer` whose batches are torch tensors."""

    def encode_batch(
        self, texts: list[str], *, max_seq: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(input_ids, attention_mask), int64 torch tensors [N, T]; see the base class."""
        input_ids, attention_mask = super().encode_batch(texts, max_seq=max_seq)
        return torch.from_numpy(input_ids), torch.from_numpy(attention_mask)


class CharTokenizer(_CharTokenizer, WordTokenizer):
    """`attndeploy.runtime.tokenizer.CharTokenizer` (one token per character) whose batches are
    torch tensors."""


class SpaceTokenizer(_SpaceTokenizer, WordTokenizer):
    """`attndeploy.runtime.tokenizer.SpaceTokenizer` (tokens split at white space) whose
    batches are torch tensors."""


def tokenizer_from_dict(raw: dict) -> WordTokenizer:
    """The tokenizer a checkpoint's record describes, by its "type" (its splitting rule):
    "word", "char" or "space"; DataError naming the known types otherwise."""
    kinds = {cls.kind: cls for cls in (WordTokenizer, CharTokenizer, SpaceTokenizer)}
    kind = raw.get("type") if isinstance(raw, dict) else None
    if kind not in kinds:
        raise DataError(f"unknown tokenizer type {kind!r}; expected one of {', '.join(kinds)}")
    return kinds[kind].from_dict(raw)
