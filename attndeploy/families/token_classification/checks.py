"""token-classification's checks part (`attndeploy.validate.families` describes the protocol):
`logits` [batch, seq, num_labels] mean something at real tokens only, so they are compared there;
the decision is each real token's tag, the argmax of its logits (a CRF tagger's is its
`tag_ids` output, the Viterbi path inside the graph, which parity compares exactly at real
tokens beside its emissions, `logits`, within the float tolerance). The JSONL files of this family
carry no per-token gold a text can be scored against, so `quantize --data` reads their texts and
reports tag agreement alone (the default `read_examples`)."""

from __future__ import annotations

import numpy as np

# `tag_ids` [batch, seq]: a CRF tagger's Viterbi path, compared exactly (an integer output)
PER_TOKEN_OUTPUTS: tuple[str, ...] = ("logits", "tag_ids")
AGREEMENT = "tag agreement"


def agreement(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """bool [N]: each real token's tag (argmax of its logits row [C]) is the reference's."""
    return np.argmax(actual, axis=-1) == np.argmax(expected, axis=-1)
