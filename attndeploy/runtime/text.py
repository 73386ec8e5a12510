"""Text in, predictions out: THE tokenization and decoding of every text path.

`InferenceModel.predict`, `attndeploy predict` and `attndeploy infer --text` all encode with
`encode_text` and decode with `decode_batch`; a served text model is to do the same. Nothing here
runs a model or imports more than numpy, so any runner can use it.

- Encoding: the model's tokenizer splits the text into the tokens the model sees, its special
  tokens included (`WordTokenizer`: none; `WordPieceTokenizer`: `[CLS] pieces [SEP]`, as the
  model was trained). A text with no token of its own (a WordPiece text of only `[CLS] [SEP]`),
  or with more than the model's `max_seq` tokens, is refused with a `TextError` (a `DataError`)
  naming its index, unless `truncate` keeps the first tokens that fit: the leading specials
  and the text's first tokens, then the closing specials (`[SEP]` stays last). A text of more
  than `max_bytes` UTF-8 bytes is refused before it is tokenized, truncate or not: a single
  300 MB "word" is one token, which the token limit never sees.
- Decoding (`runtime.contract`, the prediction contract): the model's family decodes its outputs
  (its runtime part, `attndeploy/families/<package>/runtime.py`: text classification's label,
  token classification's one tag per token, each the argmax of the logits, `probabilities`
  their softmax over the labels); GA-Net's `attended`, every family's, are the text's tokens
  whose hard gate is open, in order. Word tokens are
  the text's own (lowercased) words, so a word outside the vocabulary is shown as written
  although the model saw `<unk>`; WordPiece tokens are the pieces the model saw (`[CLS]`, `##`
  pieces, `[UNK]`, `[SEP]`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import compress
from types import ModuleType
from typing import Any

import numpy as np

from attndeploy.errors import DataError
from attndeploy.runtime.contract import (
    LABEL,
    LOGITS,
    PROBABILITIES,
    TAGS,
    _family,
    family_record,
    record,
    softmax,
)
from attndeploy.runtime.tokenizer import TextTokenizer

__all__ = ["EncodedText", "Prediction", "TextError", "decode_batch", "encode_text",
           "encode_texts", "label_names_for", "softmax", "utf8_size_over"]


class TextError(DataError):
    """A text that cannot be encoded: "text {index} {reason}[; {hint}]".

    `index` is the text's position in the caller's list; a command that reads texts from
    elsewhere (a file's lines, one --text) rewords the message from `reason`, and `too_long`
    tells it to name its own way to truncate.
    """

    def __init__(self, index: int, reason: str, *, too_long: bool = False) -> None:
        hint = "; shorten it or pass truncate=True" if too_long else ""
        super().__init__(f"text {index} {reason}{hint}")
        self.index = index
        self.reason = reason
        self.too_long = too_long


def utf8_size_over(text: str, limit: int) -> int | None:
    """The UTF-8 size of `text` when it is over `limit` bytes, else None; encodes only when the
    character count cannot decide (a character takes 1 to 4 bytes)."""
    if len(text) * 4 <= limit:
        return None
    if len(text) > limit:
        return len(text.encode("utf-8", "surrogatepass"))
    size = len(text.encode("utf-8", "surrogatepass"))
    return size if size > limit else None


@dataclass(frozen=True)
class EncodedText:
    """One text as the model sees it: ids and the tokens they came from (same length)."""

    ids: list[int]
    tokens: list[str]
    truncated: bool = False  # whether tokens past max_seq were dropped


def encode_text(
    tokenizer: TextTokenizer, text: str, *, max_seq: int, index: int = 0, truncate: bool = False,
    max_bytes: int | None = None,
) -> EncodedText:
    """`text` tokenized and encoded; TextError (naming `index`) if it has more than `max_bytes`
    UTF-8 bytes (None: no limit), no token of its own or, without `truncate`, more than
    `max_seq` tokens (special tokens included). Truncation keeps the tokenizer's framing:
    `[CLS]`, the first pieces that fit, `[SEP]`."""
    if not isinstance(text, str):
        raise TextError(index, f"is a {type(text).__name__}, not a str")
    if max_bytes is not None:
        size = utf8_size_over(text, max_bytes)
        if size is not None:
            raise TextError(index, f"has {size} bytes, more than the limit of {max_bytes} bytes "
                                   "per text")
    tokens = tokenizer.tokenize(text)
    before, after = tokenizer.framing  # special tokens around the text's own
    if len(tokens) <= before + after:
        raise TextError(index, "has no tokens; every text needs at least one word")
    truncated = len(tokens) > max_seq
    if truncated:
        specials = " (special tokens included)" if before + after else ""
        if not truncate or max_seq <= before + after:
            raise TextError(index, f"has {len(tokens)} tokens{specials}, more than the model's "
                                   f"max_seq={max_seq}", too_long=True)
        keep = max_seq - after  # the leading specials and the text's first tokens
        tokens = tokens[:keep] + tokens[len(tokens) - after:]
    return EncodedText(tokenizer.encode_tokens(tokens), tokens, truncated)


def encode_texts(
    tokenizer: TextTokenizer, texts: Sequence[str], *, max_seq: int, truncate: bool = False,
    max_bytes: int | None = None,
) -> list[EncodedText]:
    """`encode_text` of every text; the first bad one raises, naming its index."""
    if isinstance(texts, str):
        raise DataError("give a list of texts, not one str (wrap a single text in a list)")
    return [encode_text(tokenizer, text, max_seq=max_seq, index=index, truncate=truncate,
                        max_bytes=max_bytes)
            for index, text in enumerate(texts)]


@dataclass(frozen=True, eq=False)
class Prediction:
    """The decoded outputs for one text (or one row of ids): the prediction contract's fields
    (`runtime.contract`).

    `fields` are the model family's own ({field: value}, as its runtime part's `decode` gives
    them) and `runtime` that part (the module that decoded them, and writes their record).
    The attributes `label`, `tags`, `logits` and `probabilities` are those fields when the family
    has them (None otherwise; `logits` then is the model's output for the row):
    classification: `label` and `logits`/`probabilities` [num_labels]; tagging: `tags` (one
    label per token), `logits`/`probabilities` [T, num_labels] and `label` None. GA-Net: `gates`
    bool [T] and `attended`, the tokens whose gate is open. Per-token arrays cover the real
    tokens only. `scores` is the old name of `probabilities`.
    """

    label: str | None
    probabilities: np.ndarray
    tokens: list[str]
    logits: np.ndarray
    label_names: tuple[str, ...] = field(repr=False)
    tags: list[str] | None = None
    gates: np.ndarray | None = field(default=None, repr=False)
    attended: list[str] | None = None
    fields: dict[str, Any] = field(default_factory=dict, repr=False)
    runtime: ModuleType | None = field(default=None, repr=False)

    @property
    def scores(self) -> np.ndarray:
        """Deprecated: `probabilities` (the softmax of the logits)."""
        import warnings

        warnings.warn("Prediction.scores is deprecated; use Prediction.probabilities",
                      DeprecationWarning, stacklevel=2)
        return self.probabilities

    def to_dict(self) -> dict[str, Any]:
        """The contract's JSON record: tokens, the family's fields (classification: label,
        logits and probabilities by label name; tagging: tags and one mapping per token), and
        for GA-Net `attended`."""
        if self.runtime is not None:
            return family_record(self.runtime, tokens=self.tokens, fields=self.fields,
                                 names=self.label_names, attended=self.attended)
        return record(tokens=self.tokens, logits=self.logits, probabilities=self.probabilities,
                      names=self.label_names, label=self.label, tags=self.tags,
                      attended=self.attended)


def label_names_for(labels: Sequence[str] | None, num_labels: int) -> tuple[str, ...]:
    """The model's label names, or "0", "1", … when they are unknown."""
    return tuple(labels) if labels is not None else tuple(str(i) for i in range(num_labels))


def decode_batch(
    logits: np.ndarray,
    gates: np.ndarray | None,
    tokens: Sequence[list[str]],
    labels: Sequence[str] | None,
    *,
    family: ModuleType | None = None,
    tagging: bool | None = None,
    tag_ids: np.ndarray | None = None,
) -> list[Prediction]:
    """One Prediction per row of a right-padded batch, decoded by `family` (the model family's
    runtime module, `runtime.families.runtime_part`; the old `tagging=` picks the built-in
    classification or tagging family instead).

    `logits` ([B, C], tagging [B, T, C]: the family's `LOGITS_RANK`) and `gates` bool [B, T]
    are the model's outputs for the batch; `tokens[row]` are that row's real tokens (its length
    is the row's length, T at most), and the list becomes the Prediction's `tokens`. Per-row
    arrays are views of the batch's. `tag_ids` int64 [B, T]: a CRF tagger's best tag ids (its
    `tag_ids` output), which its family's `decode` takes as the tags instead of each argmax.
    """
    runtime = _family(family, tagging)
    names = label_names_for(labels, logits.shape[-1])
    lengths = [len(row_tokens) for row_tokens in tokens]
    rows = (runtime.decode(logits, lengths, names) if tag_ids is None  # a CRF's Viterbi path:
            else runtime.decode(logits, lengths, names, tag_ids=tag_ids))  # its family's tags
    if gates is not None and gates.dtype != np.bool_:
        gates = gates.astype(bool)
    predictions = []
    for row, (row_tokens, fields) in enumerate(zip(tokens, rows, strict=True)):
        row_gates = attended = None
        if gates is not None:
            row_gates = gates[row, : len(row_tokens)]  # [T_row]
            attended = list(compress(row_tokens, row_gates.tolist()))
        predictions.append(Prediction(
            label=fields.get(LABEL), probabilities=fields.get(PROBABILITIES), tokens=row_tokens,
            logits=fields.get(LOGITS, logits[row]), label_names=names, tags=fields.get(TAGS),
            gates=row_gates, attended=attended, fields=fields, runtime=runtime,
        ))
    return predictions
