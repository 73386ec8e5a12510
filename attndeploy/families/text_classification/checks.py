"""text-classification's checks part (`attndeploy.validate.families` describes the protocol): one
row of logits per text, compared whole; the decision is the label, the argmax of the logits; on
labelled texts (`quantize --data`, JSONL {"text", "label"}) the score is the accuracy."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

PER_TOKEN_OUTPUTS: tuple[str, ...] = ()  # `logits` [batch, num_labels]: nothing per token
AGREEMENT = "label agreement"
SCORE = "accuracy"


def agreement(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """bool [N]: the text's label (argmax of its logits row [C]) is the reference's."""
    return np.argmax(actual, axis=-1) == np.argmax(expected, axis=-1)


def read_examples(path: Path, labels: tuple[str, ...]) -> tuple[list[str], list[int]]:
    """The texts of a JSONL file of {"text", "label"} and their label indices in `labels`; a
    label the model does not have fails naming it (DataError)."""
    from attndeploy.data import read_jsonl
    from attndeploy.errors import DataError

    texts, names = read_jsonl(Path(path))
    index = {name: i for i, name in enumerate(labels)}
    unknown = sorted(set(names) - set(index))
    if unknown:
        raise DataError(f"{path}: label(s) {', '.join(map(repr, unknown[:5]))} are not the "
                        f"model's ({', '.join(labels)})")
    return texts, [index[name] for name in names]


def score(outputs: Sequence[np.ndarray], gold: Sequence[int]) -> float:
    """Accuracy: the share of texts whose label (argmax of its logits [C]) is the gold one."""
    right = [int(np.argmax(row)) == label for row, label in zip(outputs, gold, strict=True)]
    return sum(right) / len(right)
