"""text-regression's runtime part: one number per text, the model's output itself.

The model's `logits` are float32 [B, 1] (one "label", named `value`); a prediction's one field
is `value`, that output unchanged (no argmax, no softmax). Wire form: `value` FP32 [B, 1];
JSON record: `"value": float`; `predict`'s table: the value to four places, then the text.
The protocol is the one every family's runtime part follows (docs/prediction-contract.md,
"Family fields"; `attndeploy/families/text_classification/runtime.py`). Numpy only: the file
is shipped beside a served text model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from attndeploy.runtime.contract import FP32, WireField

VALUE = "value"
FIELDS = (VALUE,)
LOGITS_RANK = 2  # [B, 1]
TABLE_COLUMNS = (VALUE,)
TABLE_FLEXIBLE: tuple[str, ...] = ()
TABLE_TEXT = True


def wire_fields(num_labels: int) -> tuple[WireField, ...]:
    """`value` FP32 [1] per row (batch implicit); `num_labels` is 1."""
    return (WireField(VALUE, FP32, (num_labels,), "the predicted value"),)


def decode(logits: np.ndarray, lengths: Sequence[int], names: Sequence[str]
           ) -> list[dict[str, Any]]:
    """`logits` [B, 1] -> per row {"value": the row's output [1]} (a view of the batch's)."""
    return [{VALUE: logits[row]} for row in range(len(lengths))]


def record(fields: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
    return {VALUE: np.asarray(fields[VALUE]).reshape(-1).tolist()[0]}  # [1] -> float


def encode_wire(rows: Sequence[Mapping[str, Any]], width: int) -> dict[str, np.ndarray]:
    return {VALUE: np.stack([np.asarray(row[VALUE]) for row in rows])}  # [B, 1]


def decode_wire(outputs: Mapping[str, np.ndarray], row: int, length: int) -> dict[str, Any]:
    return {VALUE: np.asarray(outputs[VALUE])[row]}  # [1]


def table_cells(prediction: Any) -> list[str]:
    return [f"{float(np.asarray(prediction.fields[VALUE]).reshape(-1)[0]):.4f}"]
