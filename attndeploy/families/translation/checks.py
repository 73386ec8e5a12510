"""translation's checks part (`attndeploy.validate.families` describes the protocol) and its
hooks for `attndeploy export` and `attndeploy validate` on a translation checkpoint.

Every position of the decoder's `logits` [batch, seq, vocab] is a decision (the next target
token there), so two runs agree at a position when they choose the same token.
"""

from __future__ import annotations

import numpy as np

PER_TOKEN_OUTPUTS = ("logits",)
AGREEMENT = "next-token agreement"


def agreement(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """bool [N, T]: the same next token (argmax over the vocabulary) at each position."""
    return np.argmax(actual, axis=-1) == np.argmax(expected, axis=-1)
