"""Model-level input checks (docs/ops.md "Model-level interface"), shared by every entry point."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from attndeploy.errors import DataError


def check_model_inputs(
    input_ids: Tensor, attention_mask: Tensor, *, max_seq: int, vocab_size: int
) -> None:
    """Raise DataError for a request the model cannot take; returns None when it can."""
    if input_ids.dim() != 2 or attention_mask.dim() != 2:
        raise DataError(
            "input_ids and attention_mask must be [batch, seq], got shapes "
            f"{list(input_ids.shape)} and {list(attention_mask.shape)}"
        )
    if input_ids.shape != attention_mask.shape:
        raise DataError(
            f"input_ids {list(input_ids.shape)} and attention_mask "
            f"{list(attention_mask.shape)} must have the same shape"
        )
    if input_ids.dtype.is_floating_point or attention_mask.dtype.is_floating_point:
        raise DataError("input_ids and attention_mask must be integer tensors")
    batch, seq = input_ids.shape
    if batch == 0 or seq == 0:
        raise DataError(f"empty request: batch {batch}, seq {seq}")
    if seq > max_seq:
        raise DataError(f"sequence length {seq} exceeds the model's maximum of {max_seq}")
    valid = attention_mask != 0
    empty = torch.nonzero(~valid.any(-1)).flatten().tolist()
    if empty:
        raise DataError(f"example(s) {empty} have no real token (attention_mask is all 0)")
    lo, hi = int(input_ids.min()), int(input_ids.max())
    if lo < 0 or hi >= vocab_size:
        raise DataError(f"token ids must lie in [0, {vocab_size}), got range [{lo}, {hi}]")


def position_limit(config: Any) -> int | None:
    """The longest input a model's position table takes, from a Hugging Face-style config
    (`max_position_embeddings`; RoBERTa's positions start after its pad id); None without one."""
    limit = getattr(config, "max_position_embeddings", None)
    if not isinstance(limit, int) or isinstance(limit, bool):
        return None
    if getattr(config, "model_type", None) == "roberta":
        return limit - int(getattr(config, "pad_token_id", 1) or 0) - 1
    return limit
