"""token-classification's training part: a per-token linear head, cross-entropy per labelled
token, accuracy over labelled tokens, no baseline, no JSONL reader (built-in data sets only).

The protocol every family's training part follows is in `attndeploy.training.families`. Labels
are int64 [N, T], `IGNORE_INDEX` (-100, torch cross_entropy's default) exactly at pads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attndeploy.data.dataset import IGNORE_INDEX
from attndeploy.errors import DataError
from attndeploy.variants.api import LayerContext

# ----------------------------------------------------------------------------- the model

def build_head(config: Any, width: int, gated: bool) -> nn.Module:
    """One linear layer applied to every token (no pooling, so no gated op of its own)."""
    return nn.Linear(width, config.num_labels)


def apply_head(head: nn.Module, h: Tensor, context: LayerContext) -> tuple[Tensor, Tensor | None]:
    """h [B, T, D] -> (logits [B, T, C], None: no pooling applied gates)."""
    return head(h), None


def loss(logits: Tensor, labels: Tensor, label_smoothing: float = 0.0) -> Tensor:
    """Cross-entropy of logits [B, T, C] against tags [B, T], pads (IGNORE_INDEX) left out."""
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX,
                           label_smoothing=label_smoothing)


# ----------------------------------------------------------------------------- labels

LABEL_DTYPE = torch.long  # one tag index per token: int64 [N, T]


def check_label_names(label_names: tuple[str, ...]) -> None:
    if len(label_names) < 2 or len(set(label_names)) != len(label_names):
        raise DataError(f"label_names must hold at least 2 distinct names; got {label_names!r}")


def check_labels(labels: Tensor, attention_mask: Tensor, num_labels: int) -> None:
    """labels int64 [N, T], IGNORE_INDEX exactly at pads, each real token's in [0, num_labels)."""
    if labels.shape != attention_mask.shape:
        raise DataError(f"tagging labels must be [N, T] = {tuple(attention_mask.shape)}; "
                        f"got {tuple(labels.shape)}")
    real = attention_mask.bool()
    if (labels[~real] != IGNORE_INDEX).any():
        raise DataError(f"tagging labels must be {IGNORE_INDEX} at padded positions")
    valid = labels[real]
    if ((valid < 0) | (valid >= num_labels)).any():
        raise DataError(f"labels must lie in [0, {num_labels}) for {num_labels} label names")


def labels_tensor(values: Sequence[Sequence[int]], width: int) -> Tensor:
    """int64 [N, width] from one tag list per example, IGNORE_INDEX past each one's end."""
    labels = torch.full((len(values), width), IGNORE_INDEX, dtype=torch.long)  # [N, T]
    for row, tags in enumerate(values):
        labels[row, : len(tags)] = torch.tensor(list(tags), dtype=torch.long)
    return labels


def batch_labels(labels: Tensor, width: int) -> Tensor:
    """A batch's labels [B, T] trimmed to its longest real sequence: [B, width]."""
    return labels[:, :width]


def join_labels(first: Tensor, second: Tensor, width: int) -> Tensor:
    """[N1, t1] and [N2, t2] -> [N1 + N2, width], padded with IGNORE_INDEX."""
    def padded(tensor: Tensor) -> Tensor:  # [N, t] -> [N, width]
        return F.pad(tensor, (0, width - tensor.shape[1]), value=IGNORE_INDEX)
    return torch.cat([padded(first), padded(second)])


# ----------------------------------------------------------------------------- evaluation

PRIMARY_METRIC = "accuracy"  # over labelled tokens
GREATER_IS_BETTER = True


def metric_sums(logits: Tensor, labels: Tensor) -> dict[str, float]:
    """Correct tags and labelled tokens of one batch (pads left out)."""
    valid = labels != IGNORE_INDEX
    return {"correct": int((logits.argmax(-1) == labels)[valid].sum()), "total": int(valid.sum())}


def metrics(sums: dict[str, float]) -> dict[str, float]:
    return {"accuracy": sums.get("correct", 0) / max(1, sums.get("total", 0))}


def fit_baseline(fit_docs: Sequence[Sequence[str]], fit_labels: Sequence[Tensor],
                 eval_docs: Sequence[Sequence[str]], eval_labels: Tensor,
                 label_names: tuple[str, ...]) -> dict[str, Any]:
    """No baseline for token tagging yet: {}."""
    return {}


# ----------------------------------------------------------------------------- data files

# `train --data FILE`: JSONL {"tokens", "tags"} or CoNLL columns, the tags checked against their
# scheme, the splitting rule (words or characters) chosen once and stored (`reading.py`).
from attndeploy.families.token_classification.training.reading import (  # noqa: E402
    FILE_SUFFIXES,
    JSONL_KEYS,
    jsonl_line,
    label_encoder,
    label_names_of,
    read_example,
    read_file,
    tokenizer_class,
)

__all__ = ["FILE_SUFFIXES", "JSONL_KEYS", "jsonl_line", "label_encoder", "label_names_of",
           "read_example", "read_file", "tokenizer_class"]
