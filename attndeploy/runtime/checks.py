"""The input checks of the served model (`serving/packaging/templates/model.py.tmpl`), for `run`.

The generated python-backend model cannot import attndeploy (it runs inside Triton), so the
checks are written twice; `tests/runtime/test_model.py` runs the served model's table of bad
requests (`tests/serving/test_model_py.py`, BAD_REQUESTS) through these to keep the two alike:
same conditions, same messages, raised here as one DataError.
"""

from __future__ import annotations

import numpy as np

from attndeploy.errors import DataError
from attndeploy.runtime.names import ATTENTION_MASK, INPUT_IDS


def check_inputs(
    input_ids: np.ndarray, attention_mask: np.ndarray, *, max_seq: int, vocab_size: int
) -> None:
    """DataError unless both are int64 [batch, seq] arrays of one shape with batch, seq >= 1,
    seq <= max_seq, mask values 0/1, a real token in every row, and ids in [0, vocab_size)."""
    for name, array in ((INPUT_IDS, input_ids), (ATTENTION_MASK, attention_mask)):
        if not isinstance(array, np.ndarray):
            raise DataError(f"{name} must be a numpy array, got {type(array).__name__}")
        if array.dtype != np.int64:
            raise DataError(f"{name} must be INT64, got {array.dtype}")
        if array.ndim != 2:
            raise DataError(f"{name} must be [batch, seq], got shape {list(array.shape)}")
    if input_ids.shape != attention_mask.shape:
        raise DataError(f"{INPUT_IDS} {list(input_ids.shape)} and {ATTENTION_MASK} "
                        f"{list(attention_mask.shape)} must have the same shape")
    batch, seq = input_ids.shape
    if batch == 0 or seq == 0:
        raise DataError(f"empty request: batch {batch}, seq {seq}")
    if seq > max_seq:
        raise DataError(f"sequence length {seq} exceeds the maximum of {max_seq}")
    if not np.isin(attention_mask, (0, 1)).all():
        raise DataError(f"{ATTENTION_MASK} values must be 0 (padding) or 1 (real token)")
    empty = np.flatnonzero(~attention_mask.any(axis=1)).tolist()
    if empty:
        raise DataError(f"row(s) {empty} have no real token ({ATTENTION_MASK} is all 0)")
    low, high = int(input_ids.min()), int(input_ids.max())
    if low < 0 or high >= vocab_size:
        raise DataError(f"token ids must lie in [0, {vocab_size}), got range [{low}, {high}]")
