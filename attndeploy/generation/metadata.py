"""What the generation loop reads from an exported decoder's metadata (numpy only; the keys
`attndeploy.export.decoder` writes, its docstring lists them), parsed into `DecoderMetadata`.

The state list is all a generic loop needs to carry the cache: each entry's past input, present
output, dtype and dims, one of which may be "past" (the axis that grows; the empty past has 0
there) and one "batch".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from attndeploy.errors import DataError, ModelError

META_FAMILY = "attndeploy.family"
META_VARIANT = "attndeploy.variant"
META_VERSION = "attndeploy.version"
META_MAX_SEQ = "attndeploy.max_seq"
META_CONFIG = "attndeploy.config"
META_TOKENIZER = "attndeploy.tokenizer"
META_STATE = "attndeploy.decoder_state"
META_GENERATION = "attndeploy.generation"
FAMILY = "text-generation"
DTYPES = {"float32": np.float32, "bool": np.bool_, "float16": np.float16, "int64": np.int64}


@dataclass(frozen=True)
class StateEntry:
    past: str
    present: str
    dtype: str
    dims: tuple[str | int, ...]

    def empty(self, batch: int) -> np.ndarray:
        """The entry before any token: `batch` rows, 0 along "past"."""
        shape = tuple(batch if d == "batch" else 0 if d == "past" else int(d) for d in self.dims)
        return np.zeros(shape, dtype=DTYPES[self.dtype])

    @property
    def past_axis(self) -> int | None:
        return self.dims.index("past") if "past" in self.dims else None


@dataclass(frozen=True)
class DecoderMetadata:
    variant: str
    max_seq: int
    state: tuple[StateEntry, ...]
    bos_token_id: int
    eos_token_id: int
    pad_token_id: int
    vocab_size: int
    tokenizer: dict[str, Any] | None
    config: dict[str, Any]


def _json(meta: Mapping[str, str], key: str, source: str) -> Any:
    try:
        return json.loads(meta[key])
    except (KeyError, ValueError):
        raise ModelError(f"{source}: metadata {key!r} is missing or not JSON") from None


def is_decoder(meta: Mapping[str, str]) -> bool:
    return meta.get(META_FAMILY) == FAMILY


def parse_decoder_metadata(meta: Mapping[str, str], source: str = "the model"
                           ) -> DecoderMetadata:
    """ModelError unless `meta` is a text-generation export's."""
    if not is_decoder(meta):
        raise ModelError(f"{source} is not a text-generation export (metadata "
                         f"{META_FAMILY!r} is {meta.get(META_FAMILY)!r}); export a decoder "
                         "checkpoint with `attndeploy export`")
    generation = _json(meta, META_GENERATION, source)
    state = tuple(StateEntry(e["past"], e["present"], e["dtype"], tuple(e["dims"]))
                  for e in _json(meta, META_STATE, source))
    unknown = sorted({e.dtype for e in state} - set(DTYPES))
    if unknown:
        raise ModelError(f"{source}: unknown state dtypes {unknown}")
    record = meta.get(META_TOKENIZER) or ""
    try:
        tokenizer = json.loads(record) if record else None
    except ValueError:
        raise DataError(f"{source}: metadata {META_TOKENIZER!r} is not JSON") from None
    return DecoderMetadata(
        variant=meta.get(META_VARIANT, "?"), max_seq=int(generation["max_seq"]), state=state,
        bos_token_id=int(generation["bos_token_id"]),
        eos_token_id=int(generation["eos_token_id"]),
        pad_token_id=int(generation["pad_token_id"]),
        vocab_size=int(generation["vocab_size"]), tokenizer=tokenizer,
        config=_json(meta, META_CONFIG, source),
    )
