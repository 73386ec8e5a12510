"""image-classification's runtime part (numpy only): one label per image, the argmax of the
logits [B, C], as text-classification decodes them (`label`, `logits`, `probabilities`), and
the class's index `label_id`, which image clients key on (a data set's class numbers) and which
tells an image answer from a text one (FP32 on the wire, the contract's number type: exact for
any class count below 2**24). `lengths` is one per image (an image has no tokens)."""

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

LABEL_ID = "label_id"
FIELDS = (LABEL, LABEL_ID, LOGITS, PROBABILITIES)
LOGITS_RANK = 2  # [B, C]
TABLE_COLUMNS = ("label", "probability")
TABLE_FLEXIBLE: tuple[str, ...] = ()
TABLE_TEXT = True  # the table ends with the image's file name
# The family's raw-input served model (a hook `attndeploy package` reads): NAME_image takes
# encoded PNG or JPEG bytes and answers these FIELDS (serving/packaging/image_model.py).
SERVED_INPUT = "image"


def wire_fields(num_labels: int) -> tuple[WireField, ...]:
    return (WireField(LABEL, BYTES, (1,), "the class's name"),
            WireField(LABEL_ID, FP32, (1,), "the class's index among the labels"),
            WireField(LOGITS, FP32, (num_labels,), "the model's logits"),
            WireField(PROBABILITIES, FP32, (num_labels,), "their softmax"))


def decode(logits: np.ndarray, lengths: Sequence[int], names: Sequence[str]
           ) -> list[dict[str, Any]]:
    """`logits` [B, C] -> per image the label (argmax of the logits), its index, its logits
    [C] and their softmax [C]."""
    probabilities = softmax(logits)  # [B, C]
    best = logits.argmax(axis=-1).tolist()  # [B]
    return [{LABEL: names[best[row]], LABEL_ID: best[row], LOGITS: logits[row],
             PROBABILITIES: probabilities[row]} for row in range(len(lengths))]


def record(fields: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
    return {LABEL: fields[LABEL], LABEL_ID: int(fields[LABEL_ID]),
            LOGITS: by_label(np.asarray(fields[LOGITS]), names),
            PROBABILITIES: by_label(np.asarray(fields[PROBABILITIES]), names)}


def encode_wire(rows: Sequence[Mapping[str, Any]], width: int) -> dict[str, np.ndarray]:
    return {LABEL: column_strings([row[LABEL] for row in rows]),  # [B, 1]
            LABEL_ID: np.array([[row[LABEL_ID]] for row in rows], dtype=np.float32),  # [B, 1]
            LOGITS: np.stack([row[LOGITS] for row in rows]),  # [B, C]
            PROBABILITIES: np.stack([row[PROBABILITIES] for row in rows])}  # [B, C]


def decode_wire(outputs: Mapping[str, np.ndarray], row: int, length: int) -> dict[str, Any]:
    return {LABEL: strings(np.asarray(outputs[LABEL])[row])[0],
            LABEL_ID: int(np.asarray(outputs[LABEL_ID])[row].reshape(-1)[0]),
            LOGITS: np.asarray(outputs[LOGITS])[row],  # [C]
            PROBABILITIES: np.asarray(outputs[PROBABILITIES])[row]}


def table_cells(prediction: Any) -> list[str]:
    fields = prediction.fields
    return [fields[LABEL], f"{float(np.max(fields[PROBABILITIES])):.4f}"]
