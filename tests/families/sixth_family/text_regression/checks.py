"""text-regression's checks part (`attndeploy.validate.families` describes the protocol): one
float per text, `logits` [batch, 1] (its one "label" is `value`), compared whole: nothing is per
token. Parity is the tolerance rule on the value itself; the decision compared is the value,
which agrees where it moved by at most `VALUE_ATOL + VALUE_RTOL·|reference|` (what quantize's
`--min-agreement` holds). On texts with gold values (`quantize --data`, JSONL
{"text", "value"}) the score is Pearson's r, higher is better, so a drop is a loss of fit."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from attndeploy.errors import DataError
from attndeploy.validate.families import read_records

PER_TOKEN_OUTPUTS: tuple[str, ...] = ()  # `logits` [batch, 1]: one value per text
AGREEMENT = "value agreement"
SCORE = "pearson r"
VALUE_ATOL = 1e-2  # a value agrees within atol + rtol·|reference|
VALUE_RTOL = 1e-2


def agreement(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """bool [N]: the text's value ([N, 1] rows) is the reference's within the value tolerance."""
    a = np.asarray(actual, np.float64).reshape(len(actual), -1)[:, 0]  # [N]
    b = np.asarray(expected, np.float64).reshape(len(expected), -1)[:, 0]  # [N]
    return np.abs(a - b) <= VALUE_ATOL + VALUE_RTOL * np.abs(b)


def read_examples(path: Path, labels: tuple[str, ...]) -> tuple[list[str], list[float]]:
    """The texts of a JSONL file of {"text", "value"} and their gold values (a finite number
    each; DataError naming the line otherwise)."""
    texts, values = [], []
    for where, record in read_records(Path(path)):
        value = record.get("value")
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not math.isfinite(value):
            raise DataError(f'{where}: expected a finite number "value", got {value!r}')
        texts.append(record["text"])
        values.append(float(value))
    return texts, values


def score(outputs: Sequence[np.ndarray], gold: Sequence[float]) -> float:
    """Pearson's r between the texts' values (each output [1]) and the gold ones; 0.0 where it
    is undefined (fewer than two texts, or either side constant)."""
    predicted = np.array([float(np.asarray(row).reshape(-1)[0]) for row in outputs])  # [N]
    target = np.asarray(gold, np.float64)  # [N]
    if len(predicted) < 2 or predicted.std() == 0.0 or target.std() == 0.0:
        return 0.0
    return float(np.corrcoef(predicted, target)[0, 1])
