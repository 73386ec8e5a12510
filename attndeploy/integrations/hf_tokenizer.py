"""The WordPiece tokenizer of converted Hugging Face checkpoints (built on `tokenizers`).

Where it comes from (`attndeploy train --hf-model DIR`): the model directory's `tokenizer.json`
(a WordPiece model) or `vocab.txt`; when the directory has neither, one is trained on the
training texts (`WordPieceTokenizer.train`). Nothing is downloaded.

Encoding is BERT's: `BertNormalizer` (lowercase, accents stripped, control characters removed,
CJK characters spaced), `BertPreTokenizer` (split on whitespace and punctuation), WordPiece
(greedy longest-match-first with `##` continuation pieces; a word it cannot cover, or one longer
than `max_input_chars_per_word`, becomes `[UNK]`), then `[CLS] pieces [SEP]`. Batches are right
padded with `[PAD]`, which is id 0 as everywhere in attndeploy (docs/variants.md §1.2); the
attention mask is 1 on real tokens, specials included.

`to_dict()` (what a checkpoint's config.json holds under "tokenizer" and an exported model's
`attndeploy.tokenizer` metadata holds as JSON):

    {"type": "wordpiece",
     "tokenizer": {...},            # the `tokenizers` JSON (Tokenizer.to_str()), as an object
     "pad_id": 0, "unk_id": int, "cls_id": int, "sep_id": int,
     "lowercase": bool}

`tokenizers.Tokenizer.from_str(json.dumps(d["tokenizer"]))` rebuilds it exactly; a reader without
that library finds the vocabulary ({piece: id}) in `d["tokenizer"]["model"]["vocab"]`, the `##`
prefix in `["model"]["continuing_subword_prefix"]` and the normalizer's flags in
`["normalizer"]`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from attndeploy.errors import DataError
from attndeploy.runtime.tokenizer import pad_sequences

TYPE = "wordpiece"
PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)  # ids 0..4 in a trained vocabulary
DEFAULT_VOCAB_SIZE = 30522  # BERT's


def _tokenizers() -> Any:
    try:
        import tokenizers
    except ImportError as exc:
        raise DataError("the WordPiece tokenizer needs the `tokenizers` package: "
                        'pip install "attndeploy[hf]"') from exc
    return tokenizers


class WordPieceTokenizer:
    """A BERT WordPiece tokenizer: `encode(text) -> ids` with `[CLS]`/`[SEP]`, `[PAD]` = 0."""

    def __init__(self, tokenizer: Any) -> None:
        tokenizer.no_padding()  # batches are padded here, to attndeploy's convention
        tokenizer.no_truncation()  # an over-long text is refused, never cut silently
        raw = json.loads(tokenizer.to_str())
        if raw.get("model", {}).get("type") != "WordPiece":
            raise DataError(f"a {raw.get('model', {}).get('type')} tokenizer is not WordPiece; "
                            "attndeploy carries WordPiece tokenizers (remove the tokenizer "
                            "files to train one on the data)")
        ids = {token: tokenizer.token_to_id(token) for token in (PAD, UNK, CLS, SEP)}
        missing = [token for token, index in ids.items() if index is None]
        if missing:
            raise DataError(f"the WordPiece vocabulary lacks {', '.join(missing)}")
        if ids[PAD] != 0:
            raise DataError(f"{PAD} must be id 0 (attndeploy pads with 0); it is {ids[PAD]}")
        if tokenizer.post_processor is None:
            tokenizer.post_processor = _template(ids[CLS], ids[SEP])
        self._tokenizer = tokenizer
        self.pad_id, self.unk_id = ids[PAD], ids[UNK]
        self.cls_id, self.sep_id = ids[CLS], ids[SEP]
        normalizer = raw.get("normalizer") or {}
        self.lowercase = bool(normalizer.get("lowercase", False))

    # ------------------------------------------------------------------ construction

    @classmethod
    def train(
        cls, texts: Iterable[str], *, vocab_size: int = DEFAULT_VOCAB_SIZE,
        lowercase: bool = True, min_frequency: int = 1,
    ) -> WordPieceTokenizer:
        """A WordPiece vocabulary of at most `vocab_size` pieces learned from `texts`."""
        if vocab_size < len(SPECIAL_TOKENS) + 1:
            raise DataError(f"vocab_size must be > {len(SPECIAL_TOKENS)}; got {vocab_size}")
        tk = _tokenizers()
        tokenizer = tk.Tokenizer(tk.models.WordPiece(unk_token=UNK))
        tokenizer.normalizer = tk.normalizers.BertNormalizer(lowercase=lowercase)
        tokenizer.pre_tokenizer = tk.pre_tokenizers.BertPreTokenizer()
        tokenizer.decoder = tk.decoders.WordPiece()
        trainer = tk.trainers.WordPieceTrainer(
            vocab_size=vocab_size, min_frequency=min_frequency,
            special_tokens=list(SPECIAL_TOKENS), show_progress=False,
        )
        tokenizer.train_from_iterator(texts, trainer=trainer)
        tokenizer.post_processor = _template(tokenizer.token_to_id(CLS),
                                             tokenizer.token_to_id(SEP))
        return cls(tokenizer)

    @classmethod
    def from_directory(cls, directory: Path) -> WordPieceTokenizer | None:
        """The tokenizer saved in a model directory (`tokenizer.json`, else `vocab.txt`), or None
        when it has neither."""
        directory = Path(directory)
        tk = _tokenizers()
        if (directory / "tokenizer.json").is_file():
            try:
                return cls(tk.Tokenizer.from_file(str(directory / "tokenizer.json")))
            except Exception as exc:  # tokenizers raises plain Exception subclasses
                raise DataError(f"{directory / 'tokenizer.json'}: {exc}") from exc
        if (directory / "vocab.txt").is_file():
            lowercase = True
            config = directory / "tokenizer_config.json"
            if config.is_file():
                lowercase = bool(json.loads(config.read_text()).get("do_lower_case", True))
            tokenizer = tk.Tokenizer(tk.models.WordPiece.from_file(
                str(directory / "vocab.txt"), unk_token=UNK))
            tokenizer.normalizer = tk.normalizers.BertNormalizer(lowercase=lowercase)
            tokenizer.pre_tokenizer = tk.pre_tokenizers.BertPreTokenizer()
            tokenizer.decoder = tk.decoders.WordPiece()
            return cls(tokenizer)
        return None

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
        try:
            tokenizer = _tokenizers().Tokenizer.from_str(json.dumps(raw["tokenizer"]))
        except Exception as exc:  # tokenizers raises plain Exception subclasses
            raise DataError(f"corrupt wordpiece tokenizer: {exc}") from exc
        return cls(tokenizer)

    # ------------------------------------------------------------------ encoding

    def tokenize(self, text: str) -> list[str]:
        """The pieces of `text`, `[CLS]` and `[SEP]` included."""
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
        for index, encoding in enumerate(self._tokenizer.encode_batch(list(texts))):
            ids = encoding.ids
            if len(ids) <= 2:
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


def _template(cls_id: int, sep_id: int) -> Any:
    """`[CLS] $A [SEP]` (and BERT's pair form)."""
    return _tokenizers().processors.TemplateProcessing(
        single=f"{CLS} $A {SEP}", pair=f"{CLS} $A {SEP} $B:1 {SEP}:1",
        special_tokens=[(CLS, cls_id), (SEP, sep_id)],
    )
