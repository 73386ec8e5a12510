"""The word tokenizer of a causal language model (numpy-free, torch-free): `WordTokenizer`'s
lowercased words and punctuation, with `<bos>` and `<eos>` after `<pad>` and `<unk>`.

Ids: 0 `<pad>`, 1 `<unk>`, 2 `<bos>` (every text starts with it, so the first real token has a
context), 3 `<eos>` (every training text ends with it; generation stops on it). Text comes back
by joining the words with single spaces, none before closing punctuation nor after an opening
one: "hello , world !" reads "hello, world!". A word model cannot restore case or spacing, and
says so by being lowercase; a BPE tokenizer (the converted models of issue #49) would.

Its record (`to_dict`, the checkpoint's `tokenizer` and the export's `attndeploy.tokenizer`) is
`{"type": "lm-word", "vocab": [...]}`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from attndeploy.errors import DataError
from attndeploy.runtime.tokenizer import WordTokenizer

RECORD_TYPE = "lm-word"
SPECIALS = ("<pad>", "<unk>", "<bos>", "<eos>")
_NO_SPACE_BEFORE = set(",.!?;:)]}%'\"")
_NO_SPACE_AFTER = set("([{$")


class LMTokenizer:
    """Words in, ids out, and back (see the module docstring)."""

    PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3

    def __init__(self, vocab: Sequence[str]) -> None:
        vocab = list(vocab)
        if tuple(vocab[: len(SPECIALS)]) != SPECIALS:
            raise DataError(f"a language model's vocabulary starts with {', '.join(SPECIALS)}; "
                            f"got {vocab[:4]!r}")
        self._words = WordTokenizer(vocab)  # checks duplicates, empty and over-long words
        self.vocab = tuple(vocab)

    @classmethod
    def build(cls, texts: Iterable[str], *, max_vocab: int = 8000,
              min_freq: int = 1) -> LMTokenizer:
        """The most frequent words of `texts` (WordTokenizer.build's rules), after the specials."""
        words = WordTokenizer.build(texts, max_vocab=max(max_vocab - 2, 2), min_freq=min_freq)
        rest = [w for w in words.vocab[2:] if w not in SPECIALS]
        return cls([*SPECIALS, *rest])

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> LMTokenizer:
        if not isinstance(record, dict) or record.get("type") != RECORD_TYPE:
            raise DataError(f"not a language-model tokenizer record (type {RECORD_TYPE!r})")
        return cls(record.get("vocab") or [])

    def to_dict(self) -> dict[str, Any]:
        return {"type": RECORD_TYPE, "vocab": list(self.vocab)}

    def __len__(self) -> int:
        return len(self.vocab)

    def encode(self, text: str, *, bos: bool = True, eos: bool = False) -> list[int]:
        """The ids of `text`, after `<bos>` and before `<eos>` when asked."""
        ids = self._words.encode(text)
        return [self.BOS_ID] * bos + ids + [self.EOS_ID] * eos

    def piece(self, token_id: int, previous_id: int | None) -> str:
        """The text token `token_id` adds after `previous_id` (None: the first): its word, with
        the space before it when one belongs there; "" for a special token."""
        if not 0 <= token_id < len(self.vocab):
            raise DataError(f"token id {token_id} is outside the vocabulary of {len(self)}")
        if token_id < len(SPECIALS) and token_id != self.UNK_ID:
            return ""
        word = self.vocab[token_id]
        previous = (self.vocab[previous_id] if previous_id is not None
                    and 0 <= previous_id < len(self.vocab) else None)
        if previous is None or previous in ("<bos>", "<pad>"):
            return word
        if word[0] in _NO_SPACE_BEFORE or previous[-1] in _NO_SPACE_AFTER:
            return word
        return " " + word

    def stream(self, prompt_ids: Iterable[int] = ()) -> WordStream:
        """An incremental decoder of the tokens after `prompt_ids` (`piece` by piece)."""
        last = list(prompt_ids)[-1:]
        return WordStream(self, last[0] if last else None)

    def decode(self, ids: Iterable[int], previous_id: int | None = None) -> str:
        """The text of `ids` (special tokens dropped), as `piece` joins them."""
        out, prev = [], previous_id
        for token_id in ids:
            out.append(self.piece(int(token_id), prev))
            prev = int(token_id)
        return "".join(out)


class WordStream:
    """One sequence's new text, token by token: `push(id)` -> the text it adds."""

    def __init__(self, tokenizer: LMTokenizer, previous_id: int | None) -> None:
        self._tokenizer = tokenizer
        self._previous = previous_id

    def push(self, token_id: int) -> str:
        piece = self._tokenizer.piece(int(token_id), self._previous)
        self._previous = int(token_id)
        return piece


def tokenizer_from_record(record: dict[str, Any] | None):
    """The tokenizer a checkpoint or an export records: the word tokenizer (`lm-word`) or a
    pretrained model's own (`hf-tokenizer`, `attndeploy.generation.hf_tokenizer`); None for
    none."""
    if not record:
        return None
    kind = record.get("type") if isinstance(record, dict) else None
    if kind == RECORD_TYPE:
        return LMTokenizer.from_dict(record)
    from attndeploy.generation.hf_tokenizer import RECORD_TYPE as HF_TYPE
    from attndeploy.generation.hf_tokenizer import HFTokenizer

    if kind == HF_TYPE:
        return HFTokenizer.from_dict(record)
    raise DataError(f"unknown language-model tokenizer type {kind!r}; known: {RECORD_TYPE}, "
                    f"{HF_TYPE}")
