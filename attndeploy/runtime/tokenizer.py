"""A whitespace-and-punctuation word tokenizer with a fixed vocabulary (numpy only, no torch).

Ids 0 and 1 are always `<pad>` and `<unk>`. Text is lowercased and split into runs of word
characters and single punctuation marks, so "Hello, world!" -> ["hello", ",", "world", "!"].
Batches are right-padded (docs/variants.md §1.2): the attention mask of a row reads 1…1 0…0.

A token longer than `MAX_TOKEN_CHARS` (a base64 blob, a run of digits, a file pasted into a
field) never enters a built vocabulary, so it encodes as `<unk>` in training and inference alike;
one such token would otherwise be a "word" of megabytes in every checkpoint's config.json.

This is the one implementation: training imports it through `attndeploy.data.tokenizer` (which
adds torch tensors to `encode_batch`), in-process inference (`attndeploy.runtime`) and
`attndeploy infer` import it from here, so none of them loads torch.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Protocol

import numpy as np

from attndeploy.errors import DataError

# A word is a run of letters, digits or underscores; any other non-space character is its own token.
_TOKEN_RE = re.compile(r"\w+|[^\w\s]")

# Longer tokens are not words: they stay out of the vocabulary and encode as <unk>. English words
# stop far below 100 characters; a limit this high lets any real word or identifier through.
MAX_TOKEN_CHARS = 100


def pad_sequences(sequences: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad id lists to the longest one: (input_ids, attention_mask), both int64 [N, T].

    Every sequence must hold at least one id (an all-pad row is invalid input, docs/variants.md
    §1.2); callers check that first so that their error can name the text.
    """
    width = max(map(len, sequences), default=0)
    input_ids = np.zeros((len(sequences), width), dtype=np.int64)  # [N, T], 0 = <pad>
    attention_mask = np.zeros((len(sequences), width), dtype=np.int64)  # [N, T], 1 = real
    for row, seq in enumerate(sequences):
        input_ids[row, : len(seq)] = seq
        attention_mask[row, : len(seq)] = 1
    return input_ids, attention_mask


class TextTokenizer(Protocol):
    """What the text paths need of a tokenizer (`WordTokenizer`, `runtime.wordpiece`'s
    `WordPieceTokenizer`): `tokenize` gives the tokens the model sees, special tokens included;
    `framing` counts the special tokens it puts (before, after) every text's own tokens."""

    framing: tuple[int, int]

    def tokenize(self, text: str) -> list[str]: ...

    def encode_tokens(self, tokens: Iterable[str]) -> list[int]: ...

    def decode(self, ids: Iterable[int]) -> list[str]: ...

    def __len__(self) -> int: ...


class WordTokenizer:
    """Lowercased word/punctuation tokenizer; unknown words map to `<unk>` (id 1)."""

    framing = (0, 0)  # no special tokens around a text
    kind = "word"  # its record's "type": the splitting rule (`CharTokenizer`'s is "char")
    PAD = "<pad>"
    UNK = "<unk>"
    PAD_ID = 0
    UNK_ID = 1

    def __init__(self, vocab: list[str]) -> None:
        vocab = list(vocab)
        if len(vocab) < 2 or vocab[0] != self.PAD or vocab[1] != self.UNK:
            raise DataError(
                f"a vocabulary must start with {self.PAD!r}, {self.UNK!r} (ids 0 and 1); "
                f"got {vocab[:2]!r}"
            )
        bad = [word for word in vocab if not isinstance(word, str) or not word]
        if bad:
            raise DataError(f"vocabulary entries must be non-empty strings; got {bad[:5]!r}")
        # A vocabulary holds no over-long token, so encode maps every one to <unk>: whatever
        # built the vocabulary, training and inference treat such tokens alike.
        long = next((i for i, word in enumerate(vocab) if len(word) > MAX_TOKEN_CHARS), None)
        if long is not None:
            raise DataError(
                f"vocabulary word {long} is {len(vocab[long]):,} characters long; a token may "
                f"have at most {MAX_TOKEN_CHARS} (longer ones encode as {self.UNK!r})"
            )
        counts = Counter(vocab)
        duplicates = sorted(word for word, count in counts.items() if count > 1)
        if duplicates:
            raise DataError(f"vocabulary holds duplicate words: {duplicates[:10]!r}")
        self._vocab = vocab
        self._ids = {word: index for index, word in enumerate(vocab)}

    @classmethod
    def build(
        cls, texts: Iterable[str], *, max_vocab: int = 20000, min_freq: int = 1
    ) -> WordTokenizer:
        """A vocabulary of the most frequent words of `texts` (ties alphabetical).

        `max_vocab` counts the two special tokens; words seen fewer than `min_freq` times, and
        tokens longer than `MAX_TOKEN_CHARS`, are left out and will encode as `<unk>`.
        """
        if max_vocab < 2:
            raise DataError(f"max_vocab must be at least 2 (for <pad> and <unk>); got {max_vocab}")
        if min_freq < 1:
            raise DataError(f"min_freq must be at least 1; got {min_freq}")
        counts: Counter[str] = Counter()
        for text in texts:
            counts.update(cls.tokenize(text))
        for special in (cls.PAD, cls.UNK):
            counts.pop(special, None)
        ranked = sorted(
            (word for word, count in counts.items()
             if count >= min_freq and len(word) <= MAX_TOKEN_CHARS),
            key=lambda word: (-counts[word], word),
        )
        return cls([cls.PAD, cls.UNK, *ranked[: max_vocab - 2]])

    @staticmethod
    def tokenize(text: str) -> list[str]:
        """Lowercase, then split into words and single punctuation marks."""
        return _TOKEN_RE.findall(text.lower())

    def encode_tokens(self, tokens: Iterable[str]) -> list[int]:
        """The ids of tokens from `tokenize`; unknown ones (over-long ones included) become 1."""
        ids = self._ids
        unk = self.UNK_ID
        return [ids.get(token, unk) for token in tokens]

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`; unknown words become 1 (`<unk>`), tokens longer than
        `MAX_TOKEN_CHARS` included (no vocabulary holds one)."""
        return self.encode_tokens(self.tokenize(text))

    def encode_batch(
        self, texts: list[str], *, max_seq: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """(input_ids, attention_mask), int64 [N, T], right-padded to the longest text.

        T <= max_seq. A text with more than `max_seq` tokens or with no token at all is refused
        (no silent truncation); the error names the text's index.
        """
        if max_seq < 1:
            raise DataError(f"max_seq must be at least 1; got {max_seq}")
        if not texts:
            raise DataError("encode_batch needs at least one text")
        sequences = []
        for index, text in enumerate(texts):
            ids = self.encode(text)
            if not ids:
                raise DataError(f"text {index} has no tokens; every example needs at least one")
            if len(ids) > max_seq:
                raise DataError(
                    f"text {index} has {len(ids)} tokens, more than max_seq={max_seq}; "
                    "shorten it or raise max_seq"
                )
            sequences.append(ids)
        return pad_sequences(sequences)

    def decode(self, ids: Iterable[int]) -> list[str]:
        """The tokens of `ids` (pads included, as `<pad>`); an id outside the vocabulary fails."""
        tokens = []
        for raw in ids:
            index = int(raw)
            if not 0 <= index < len(self._vocab):
                raise DataError(f"token id {index} is outside the vocabulary of {len(self)} words")
            tokens.append(self._vocab[index])
        return tokens

    @property
    def vocab(self) -> tuple[str, ...]:
        return tuple(self._vocab)

    def __len__(self) -> int:
        return len(self._vocab)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, WordTokenizer) and self.kind == other.kind
                and self._vocab == other._vocab)

    def __hash__(self) -> int:
        return hash(tuple(self._vocab)) if self.kind == "word" else hash((self.kind, *self._vocab))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(vocab_size={len(self)})"

    def to_dict(self) -> dict:
        return {"type": self.kind, "vocab": list(self._vocab)}

    @classmethod
    def from_dict(cls, raw: dict) -> WordTokenizer:
        """Inverse of `to_dict` (a record of this class's `kind`); anything else fails with a
        DataError saying what is wrong."""
        if not isinstance(raw, dict):
            raise DataError(f"a tokenizer must be a JSON object; got {type(raw).__name__}")
        if raw.get("type") != cls.kind:
            raise DataError(f"unknown tokenizer type {raw.get('type')!r}; expected {cls.kind!r}")
        vocab = raw.get("vocab")
        if not isinstance(vocab, list):
            raise DataError("a tokenizer needs a 'vocab' list of words")
        return cls(vocab)


class CharTokenizer(WordTokenizer):
    """One token per character, spaces dropped, lowercased: the splitting rule of a
    character-level data set (MSRA's Chinese NER tags every character). Its record is
    `{"type": "char", "vocab": [...]}`, so predict and a served text model split raw text as
    training did, never by a guess. `tokenize("北京 ok") -> ["北", "京", "o", "k"]`."""

    kind = "char"

    @staticmethod
    def tokenize(text: str) -> list[str]:
        """Every character that is not white space, lowercased (one token each)."""
        return [char.lower() for char in text if not char.isspace()]


class SpaceTokenizer(WordTokenizer):
    """Tokens separated by white space, lowercased: the splitting rule of a pre-tokenized
    word-level set whose tokens are no single words of `WordTokenizer` (CoNLL-2003's
    `1996-08-22`, `U.S.`). Its record is `{"type": "space", ...}`; raw text given to such a model
    must be split as its training data was. `tokenize("U.S. troops") -> ["u.s.", "troops"]`."""

    kind = "space"

    @staticmethod
    def tokenize(text: str) -> list[str]:
        """The text lowercased, split at white space."""
        return text.lower().split()
