"""A pretrained model's own tokenizer (a converted Hugging Face decoder's BPE, issue #49), run by
the `tokenizers` package from its tokenizer.json: no transformers, no torch.

Its record (the checkpoint's `tokenizer`, the export's `attndeploy.tokenizer`) is
`{"type": "hf-tokenizer", "tokenizer_json": "...", "bos_token_id", "eos_token_id",
"pad_token_id", "chat_template"}`. `encode(text, bos=True)` adds the special tokens the
tokenizer's own post-processor adds (SmolLM2's: none), as `tokenizer(text)` does in
transformers; `decode` drops special tokens. Byte-level BPE splits a character over several
tokens, so text is streamed by `stream()` (an incremental decoder that holds back an unfinished
character), not token by token.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from attndeploy.errors import DataError

RECORD_TYPE = "hf-tokenizer"


def _tokenizers():
    try:
        import tokenizers
    except ImportError:
        raise DataError("this model's tokenizer needs the `tokenizers` package: pip install "
                        "tokenizers") from None
    return tokenizers


class TextStream:
    """One sequence's text as its tokens come: `push(token_id)` -> the new text ("" while a
    character is unfinished)."""

    def __init__(self, owner: HFTokenizer, prompt_ids: Iterable[int] = ()) -> None:
        from tokenizers.decoders import DecodeStream

        self._owner = owner
        prefill = list(prompt_ids)
        try:  # the prompt's last tokens give the first new piece its leading space
            self._stream = DecodeStream(ids=prefill, skip_special_tokens=True)
        except TypeError:  # an older tokenizers without prefill
            self._stream = DecodeStream(skip_special_tokens=True)

    def push(self, token_id: int) -> str:
        return self._stream.step(self._owner.backend, int(token_id)) or ""


class HFTokenizer:
    """Text <-> ids by a tokenizer.json (see the module docstring)."""

    def __init__(self, tokenizer_json: str, *, bos_token_id: int, eos_token_id: int,
                 pad_token_id: int, chat_template: str | None = None) -> None:
        try:
            self.backend = _tokenizers().Tokenizer.from_str(tokenizer_json)
        except Exception as exc:  # tokenizers raises its own Exception type
            raise DataError(f"not a readable tokenizer.json ({str(exc)[:200]})") from None
        self.tokenizer_json = tokenizer_json
        self.BOS_ID, self.EOS_ID, self.PAD_ID = int(bos_token_id), int(eos_token_id), int(
            pad_token_id)
        self.chat_template = chat_template

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> HFTokenizer:
        if not isinstance(record, dict) or record.get("type") != RECORD_TYPE:
            raise DataError(f"not a {RECORD_TYPE!r} tokenizer record")
        try:
            return cls(record["tokenizer_json"], bos_token_id=record["bos_token_id"],
                       eos_token_id=record["eos_token_id"], pad_token_id=record["pad_token_id"],
                       chat_template=record.get("chat_template"))
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"a {RECORD_TYPE!r} record is missing or has a bad field "
                            f"({exc})") from None

    def to_dict(self) -> dict[str, Any]:
        return {"type": RECORD_TYPE, "tokenizer_json": self.tokenizer_json,
                "bos_token_id": self.BOS_ID, "eos_token_id": self.EOS_ID,
                "pad_token_id": self.PAD_ID, "chat_template": self.chat_template}

    def __len__(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, *, bos: bool = True, eos: bool = False) -> list[int]:
        """The ids of `text`, with the tokenizer's own special tokens when `bos`."""
        ids = list(self.backend.encode(text, add_special_tokens=bos).ids)
        return ids + [self.EOS_ID] * eos

    def decode(self, ids: Iterable[int], previous_id: int | None = None) -> str:
        """The text of `ids`, special tokens dropped (`previous_id`: the token before them, whose
        text is not repeated)."""
        ids = [int(i) for i in ids]
        if previous_id is None:
            return self.backend.decode(ids, skip_special_tokens=True)
        before = self.backend.decode([int(previous_id)], skip_special_tokens=True)
        whole = self.backend.decode([int(previous_id), *ids], skip_special_tokens=True)
        return whole[len(before):] if whole.startswith(before) else whole

    def piece(self, token_id: int, previous_id: int | None) -> str:
        """The text `token_id` adds after `previous_id` (whole characters only: `stream()` is
        exact where a character spans tokens)."""
        if not 0 <= int(token_id) < len(self):
            raise DataError(f"token id {token_id} is outside the vocabulary of {len(self)}")
        return self.decode([token_id], previous_id)

    def stream(self, prompt_ids: Iterable[int] = ()) -> TextStream:
        return TextStream(self, prompt_ids)
