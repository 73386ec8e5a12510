"""The WordPiece tokenizer of converted Hugging Face checkpoints, read from its record (no torch).

Encoding is BERT's, done by the `tokenizers` library: `BertNormalizer` (lowercase, accents
stripped, control characters removed, CJK characters spaced), `BertPreTokenizer` (split on
whitespace and punctuation), WordPiece (greedy longest-match-first with `##` continuation pieces;
a word it cannot cover, or one longer than `max_input_chars_per_word`, becomes `[UNK]`), then
`[CLS] pieces [SEP]`. Batches are right padded with `[PAD]`, which is id 0 as everywhere in
attndeploy (docs/variants.md §1.2); the attention mask is 1 on real tokens, specials included.

The record (`to_dict()`: a checkpoint's config.json "tokenizer", an exported model's
`attndeploy.tokenizer` metadata as JSON, a served text model's `tokenizer.json`):

    {"type": "wordpiece",
     "tokenizer": {...},            # the `tokenizers` JSON (Tokenizer.to_str()), as an object
     "pad_id": 0, "unk_id": int, "cls_id": int, "sep_id": int,
     "lowercase": bool}

`tokenizers.Tokenizer.from_str(json.dumps(d["tokenizer"]))` rebuilds it exactly; a reader without
that library finds the vocabulary ({piece: id}) in `d["tokenizer"]["model"]["vocab"]`, the `##`
prefix in `["model"]["continuing_subword_prefix"]` and the normalizer's flags in `["normalizer"]`.

This module is the one implementation: in-process inference and `attndeploy infer` build it from
the metadata (`runtime.metadata`), a served text model from its shipped copy of this file
(`runtime.shipping`), and training (`attndeploy.integrations.hf_tokenizer`) adds the two ways of
making one (training a vocabulary, reading a model folder). It imports the standard library,
numpy and `tokenizers` (on first use) only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from attndeploy.errors import DataError
from attndeploy.runtime.tokenizer import pad_sequences

TYPE = "wordpiece"
PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"


def tokenizers_module() -> Any:
    """The `tokenizers` package, or a DataError saying how to install it."""
    try:
        import tokenizers
    except ImportError as exc:
        raise DataError("the WordPiece tokenizer needs the `tokenizers` package: "
                        "pip install tokenizers (or attndeploy[hf])") from exc
    return tokenizers


def cls_sep_template(cls_id: int, sep_id: int) -> Any:
    """`[CLS] $A [SEP]` (and BERT's pair form), the post-processor of a WordPiece tokenizer."""
    return tokenizers_module().processors.TemplateProcessing(
        single=f"{CLS} $A {SEP}", pair=f"{CLS} $A {SEP} $B:1 {SEP}:1",
        special_tokens=[(CLS, cls_id), (SEP, sep_id)],
    )


class WordPieceTokenizer:
    """A BERT WordPiece tokenizer: `encode(text) -> ids` with `[CLS]`/`[SEP]`, `[PAD]` = 0."""

    # Special tokens that frame every encoded text: one before its pieces ([CLS]), one after
    # ([SEP]). `runtime.text.encode_text` keeps both when it truncates.
    framing = (1, 1)

    def __init__(self, tokenizer: Any) -> None:
        tokenizer.no_padding()  # batches are padded here, to attndeploy's convention
        tokenizer.no_truncation()  # an over-long text is refused or cut here, never silently
        raw = json.loads(tokenizer.to_str())
        kind = (raw.get("model") or {}).get("type")
        if kind != "WordPiece":
            raise DataError(f"a {kind} tokenizer is not WordPiece; attndeploy carries WordPiece "
                            "tokenizers (remove the tokenizer files to train one on the data)")
        ids = {token: tokenizer.token_to_id(token) for token in (PAD, UNK, CLS, SEP)}
        missing = [token for token, index in ids.items() if index is None]
        if missing:
            raise DataError(f"the WordPiece vocabulary lacks {', '.join(missing)}")
        if ids[PAD] != 0:
            raise DataError(f"{PAD} must be id 0 (attndeploy pads with 0); it is {ids[PAD]}")
        if tokenizer.post_processor is None:
            tokenizer.post_processor = cls_sep_template(ids[CLS], ids[SEP])
        self._tokenizer = tokenizer
        self.pad_id, self.unk_id = ids[PAD], ids[UNK]
        self.cls_id, self.sep_id = ids[CLS], ids[SEP]
        normalizer = raw.get("normalizer") or {}
        self.lowercase = bool(normalizer.get("lowercase", False))

    # ------------------------------------------------------------------ the record

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": TYPE,
            "tokenizer": json.loads(self._tokenizer.to_str()),
            "pad_id": self.pad_id, "unk_id": self.unk_id,
            "cls_id": self.cls_id, "sep_id": self.sep_id,
            "lowercase": self.lowercase,
        }

    @classmethod
    def from_dict(cls, raw: Any) -> WordPieceTokenizer:
        """Inverse of `to_dict`; anything else fails with a DataError saying what is wrong."""
        if not isinstance(raw, dict) or raw.get("type") != TYPE:
            kind = raw.get("type") if isinstance(raw, dict) else type(raw).__name__
            raise DataError(f"expected a {TYPE!r} tokenizer, got {kind!r}")
        if not isinstance(raw.get("tokenizer"), dict):
            raise DataError("a wordpiece tokenizer needs its 'tokenizer' JSON object")
        library = tokenizers_module()
        try:
            tokenizer = library.Tokenizer.from_str(json.dumps(raw["tokenizer"]))
        except Exception as exc:  # tokenizers raises plain Exception subclasses
            raise DataError(f"corrupt wordpiece tokenizer: {exc}") from exc
        made = cls(tokenizer)
        recorded = {key: raw.get(key) for key in ("pad_id", "unk_id", "cls_id", "sep_id")}
        found = {"pad_id": made.pad_id, "unk_id": made.unk_id, "cls_id": made.cls_id,
                 "sep_id": made.sep_id}
        wrong = [f"{key} {recorded[key]!r} (the vocabulary says {found[key]})"
                 for key in found if recorded[key] is not None and recorded[key] != found[key]]
        if wrong:
            raise DataError(f"the wordpiece record disagrees with its vocabulary: "
                            f"{', '.join(wrong)}")
        return made

    # ------------------------------------------------------------------ encoding

    def tokenize(self, text: str) -> list[str]:
        """The pieces of `text`, `[CLS]` and `[SEP]` included (a word WordPiece cannot cover
        is `[UNK]`)."""
        return self._tokenizer.encode(text).tokens

    def encode_tokens(self, tokens: Iterable[str]) -> list[int]:
        """The ids of pieces from `tokenize`; a piece outside the vocabulary becomes `[UNK]`."""
        lookup, unk = self._tokenizer.token_to_id, self.unk_id
        return [unk if (index := lookup(token)) is None else index for token in tokens]

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`: `[CLS]`, its pieces, `[SEP]`."""
        return self._tokenizer.encode(text).ids

    def encode_batch(self, texts: Sequence[str], *, max_seq: int) -> tuple[np.ndarray, np.ndarray]:
        """(input_ids, attention_mask), int64 [N, T], right padded with 0 to the longest text.

        A text with more than `max_seq` tokens (specials included) or without a piece is refused
        with its index (no silent truncation).
        """
        if not texts:
            raise DataError("encode_batch needs at least one text")
        sequences = []
        framing = sum(self.framing)
        for index, encoding in enumerate(self._tokenizer.encode_batch(list(texts))):
            ids = encoding.ids
            if len(ids) <= framing:
                raise DataError(f"text {index} has no tokens; every example needs at least one")
            if len(ids) > max_seq:
                raise DataError(f"text {index} has {len(ids)} tokens ([CLS] and [SEP] included), "
                                f"more than max_seq={max_seq}; shorten it or raise max_seq")
            sequences.append(ids)
        return pad_sequences(sequences)

    def decode(self, ids: Iterable[int]) -> list[str]:
        """The pieces of `ids` (pads as `[PAD]`); an id outside the vocabulary fails."""
        tokens = []
        for raw in ids:
            token = self._tokenizer.id_to_token(int(raw))
            if token is None:
                raise DataError(f"token id {int(raw)} is outside the vocabulary of {len(self)}")
            tokens.append(token)
        return tokens

    def __len__(self) -> int:
        return self._tokenizer.get_vocab_size(with_added_tokens=True)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WordPieceTokenizer) and self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]  # mutable-looking; compare with ==

    def __repr__(self) -> str:
        return f"WordPieceTokenizer(vocab_size={len(self)})"
