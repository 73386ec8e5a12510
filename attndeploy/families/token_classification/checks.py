"""token-classification's checks part (`attndeploy.validate.families` describes the protocol):
`logits` [batch, seq, num_labels] mean something at real tokens only, so they are compared there;
the decision is each real token's tag, the argmax of its logits. The JSONL files of this family
carry no per-token gold a text can be scored against, so `quantize --data` reads their texts and
reports tag agreement alone (the default `read_examples`)."""

from __future__ import annotations

import numpy as np

PER_TOKEN_OUTPUTS: tuple[str, ...] = ("logits",)
AGREEMENT = "tag agreement"


def agreement(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """bool [N]: each real token's tag (argmax of its logits row [C]) is the reference's."""
    return np.argmax(actual, axis=-1) == np.argmax(expected, axis=-1)
