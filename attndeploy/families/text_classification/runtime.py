"""text-classification's runtime part: one label per text, the argmax of the logits.

The family runtime protocol (docs/prediction-contract.md, "Family fields"; numpy only, shipped
beside a served text model, so it imports only the standard library, numpy, `attndeploy.errors`
and the shipped runtime modules):

- `FIELDS`: the family's own fields of a prediction, in wire order (`tokens` before them and
  gating's `attended` after them are every family's, `runtime.contract`'s).
- `LOGITS_RANK`: the rank of the model's `logits`, batch included ([B, C]: 2).
- `wire_fields(num_labels)`: each field's `contract.WireField` (wire datatype, dims per row,
  doc): the served text model's outputs between `tokens` and `attended`.
- `decode(logits, lengths, names)`: a batch of model outputs (right-padded) -> one {field:
  value} per row (`lengths`: each row's token count); the values are a `Prediction`'s `fields`.
- `record(fields, names)`: one row's fields as JSON-ready values, in `FIELDS` order.
- `encode_wire(rows, width)`: the rows' fields as batch arrays (per-token ones padded to
  `width`); `decode_wire(outputs, row, length)`: one row of them back as `decode` gave it.
- `TABLE_COLUMNS`, `TABLE_FLEXIBLE` (those that wrap), `TABLE_TEXT` (whether the text is shown
  last) and `table_cells(prediction)`: `attndeploy predict`'s table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from attndeploy.runtime.contract import (
    BYTES,
    FP32,
    LABEL,
    LOGITS,
    PROBABILITIES,
    WireField,
    by_label,
    column_strings,
    softmax,
    strings,
)

FIELDS = (LABEL, LOGITS, PROBABILITIES)
LOGITS_RANK = 2  # [B, C]
TABLE_COLUMNS = ("label", "probability")
TABLE_FLEXIBLE: tuple[str, ...] = ()
TABLE_TEXT = True


def wire_fields(num_labels: int) -> tuple[WireField, ...]:
    return (WireField(LABEL, BYTES, (1,), "the label's name"),
            WireField(LOGITS, FP32, (num_labels,), "the id model's logits"),
            WireField(PROBABILITIES, FP32, (num_labels,), "their softmax"))


def decode(logits: np.ndarray, lengths: Sequence[int], names: Sequence[str]
           ) -> list[dict[str, Any]]:
    """`logits` [B, C] -> per row the label (argmax of the logits: a decision is never taken on
    probabilities), the row's logits [C] and their softmax [C] (views of the batch's)."""
    probabilities = softmax(logits)  # [B, C]
    best = logits.argmax(axis=-1).tolist()  # [B], as Python ints
    return [{LABEL: names[best[row]], LOGITS: logits[row], PROBABILITIES: probabilities[row]}
            for row in range(len(lengths))]


def record(fields: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
    return {LABEL: fields[LABEL],
            LOGITS: by_label(np.asarray(fields[LOGITS]), names),
            PROBABILITIES: by_label(np.asarray(fields[PROBABILITIES]), names)}


def encode_wire(rows: Sequence[Mapping[str, Any]], width: int) -> dict[str, np.ndarray]:
    return {LABEL: column_strings([row[LABEL] for row in rows]),  # [B, 1]
            LOGITS: np.stack([row[LOGITS] for row in rows]),  # [B, C]
            PROBABILITIES: np.stack([row[PROBABILITIES] for row in rows])}  # [B, C]


def decode_wire(outputs: Mapping[str, np.ndarray], row: int, length: int) -> dict[str, Any]:
    return {LABEL: strings(np.asarray(outputs[LABEL])[row])[0],
            LOGITS: np.asarray(outputs[LOGITS])[row],  # [C]
            PROBABILITIES: np.asarray(outputs[PROBABILITIES])[row]}


def table_cells(prediction: Any) -> list[str]:
    fields = prediction.fields
    return [fields[LABEL], f"{float(np.max(fields[PROBABILITIES])):.4f}"]
