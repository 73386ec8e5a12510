"""translation's runtime part (numpy only).

A translation model is run by the encoder-decoder loop (`attndeploy.generation.seq2seq`:
greedy and beam search over the exported encoder and decoder), not by `predict`'s one pass;
this part keeps the family protocol (docs/prediction-contract.md, "Family fields") whole so the
generic stages can read the family: one decoder pass's `logits` [B, T, V] decode to each row's
`next_target_token`, the entry of the largest score after its last real token (right padding).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from attndeploy.runtime.contract import BYTES, WireField

NEXT_TOKEN = "next_target_token"
FIELDS = (NEXT_TOKEN,)
LOGITS_RANK = 3  # [B, T, V]
TABLE_COLUMNS = (NEXT_TOKEN,)
TABLE_FLEXIBLE: tuple[str, ...] = ()
TABLE_TEXT = True


def wire_fields(num_labels: int) -> tuple[WireField, ...]:
    """`next_target_token` BYTES [1] per row: the next target token."""
    return (WireField(NEXT_TOKEN, BYTES, (1,), "the most likely next token"),)


def decode(logits: np.ndarray, lengths: Sequence[int], names: Sequence[str]
           ) -> list[dict[str, Any]]:
    """`logits` [B, T, V] -> per row {"next_target_token": the entry after its last token}
    (`names` is the vocabulary)."""
    return [{NEXT_TOKEN: names[int(np.argmax(logits[row, length - 1]))]}
            for row, length in enumerate(lengths)]


def record(fields: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
    return {NEXT_TOKEN: str(fields[NEXT_TOKEN])}


def encode_wire(rows: Sequence[Mapping[str, Any]], width: int) -> dict[str, np.ndarray]:
    return {NEXT_TOKEN: np.array([[row[NEXT_TOKEN].encode()] for row in rows],
                                 dtype=object)}  # [B, 1]


def decode_wire(outputs: Mapping[str, np.ndarray], row: int, length: int) -> dict[str, Any]:
    value = np.asarray(outputs[NEXT_TOKEN])[row].reshape(-1)[0]
    return {NEXT_TOKEN: value.decode() if isinstance(value, bytes) else str(value)}


def table_cells(prediction: Any) -> list[str]:
    return [str(prediction.fields[NEXT_TOKEN])]
