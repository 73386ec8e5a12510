"""text-classification's training part: a pooled head, cross-entropy on one class index per text,
accuracy, the bag-of-words naive Bayes baseline, and JSONL lines `{"text": ..., "label": ...}`.

The protocol every family's training part follows is in `attndeploy.training.families`. This
module sits at the model layer (tests/test_layers.py): the checkpoint reader builds its head.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attndeploy.data.baseline import baseline_metrics
from attndeploy.data.jsonl import text_of
from attndeploy.errors import DataError
from attndeploy.models.heads import PoolingClassifier
from attndeploy.variants.api import LayerContext

# ----------------------------------------------------------------------------- the model

def build_head(config: Any, width: int, gated: bool) -> nn.Module:
    """Additive attention pooling over the encoder's output then a linear layer (gated pooling
    for a gated variant)."""
    return PoolingClassifier(width, config.pool_hidden, config.num_labels, gated=gated)


def apply_head(head: nn.Module, h: Tensor, context: LayerContext) -> tuple[Tensor, Tensor | None]:
    """h [B, T, D] -> (logits [B, C], the gates the pooling applied or None)."""
    return head(h, context)


def loss(logits: Tensor, labels: Tensor, label_smoothing: float = 0.0) -> Tensor:
    """Cross-entropy of logits [B, C] against class indices [B]."""
    return F.cross_entropy(logits, labels, label_smoothing=label_smoothing)


# ----------------------------------------------------------------------------- labels

LABEL_DTYPE = torch.long  # one class index per example: int64 [N]


def check_label_names(label_names: tuple[str, ...]) -> None:
    if len(label_names) < 2 or len(set(label_names)) != len(label_names):
        raise DataError(f"label_names must hold at least 2 distinct names; got {label_names!r}")


def check_labels(labels: Tensor, attention_mask: Tensor, num_labels: int) -> None:
    """labels int64 [N], each in [0, num_labels)."""
    if labels.shape != (attention_mask.shape[0],):
        raise DataError(f"classification labels must be [N] = [{attention_mask.shape[0]}]; "
                        f"got {tuple(labels.shape)}")
    if ((labels < 0) | (labels >= num_labels)).any():
        raise DataError(f"labels must lie in [0, {num_labels}) for {num_labels} label names")


def labels_tensor(values: Sequence[int], width: int) -> Tensor:
    """int64 [N] from one class index per example (`width`, the ids' T, is not needed)."""
    return torch.tensor(list(values), dtype=torch.long)


def batch_labels(labels: Tensor, width: int) -> Tensor:
    """A batch's labels [B] (nothing to trim to the batch's `width`)."""
    return labels


def join_labels(first: Tensor, second: Tensor, width: int) -> Tensor:
    """[N1] and [N2] -> [N1 + N2]."""
    return torch.cat([first, second])


# ----------------------------------------------------------------------------- evaluation

PRIMARY_METRIC = "accuracy"  # what model selection and the baseline comparison read
GREATER_IS_BETTER = True


def metric_sums(logits: Tensor, labels: Tensor) -> dict[str, float]:
    """One batch's contribution to `metrics`: correct predictions and labelled examples."""
    return {"correct": int((logits.argmax(-1) == labels).sum()), "total": labels.shape[0]}


def metrics(sums: dict[str, float]) -> dict[str, float]:
    """The evaluation's metrics from the summed `metric_sums` (before `loss` and `examples`)."""
    return {"accuracy": sums.get("correct", 0) / max(1, sums.get("total", 0))}


def fit_baseline(fit_docs: Sequence[Sequence[str]], fit_labels: Sequence[Tensor],
                 eval_docs: Sequence[Sequence[str]], eval_labels: Tensor,
                 label_names: tuple[str, ...]) -> dict[str, Any]:
    """Bag-of-words naive Bayes fitted on `fit_docs` (token lists) and their labels (one tensor
    per part), scored on the held-out ones: baseline, baseline_accuracy, baseline_alpha."""
    labels = torch.cat(list(fit_labels)).tolist()
    return baseline_metrics(fit_docs, labels, eval_docs, eval_labels.tolist(), len(label_names))


# ----------------------------------------------------------------------------- JSONL files

JSONL_KEYS = ("text", "label")  # what a line of `train --data FILE` holds


def read_example(obj: dict[str, Any], where: str) -> tuple[str, str]:
    """(text, label name) of one JSONL object; DataError naming `where` (file:line)."""
    for key in JSONL_KEYS:
        if key not in obj:
            raise DataError(f"{where}: missing {key!r}")
    text, label = text_of(obj, where), obj["label"]
    if isinstance(label, bool) or not isinstance(label, str | int):
        raise DataError(f"{where}: 'label' must be a string or an integer; got {json.dumps(label)}")
    label = str(label)
    if not label:
        raise DataError(f"{where}: empty label")
    return text, label


def label_names_of(targets: Sequence[str], path: Any) -> tuple[str, ...]:
    """The file's distinct labels, sorted; at least 2."""
    distinct = sorted(set(targets))
    if len(distinct) < 2:
        raise DataError(f"{path}: needs at least 2 distinct labels to train a classifier; "
                        f"found only {distinct!r} in {len(targets)} examples")
    return tuple(distinct)


def label_encoder(label_names: tuple[str, ...]) -> Callable[[str, str], int]:
    """label name, where -> its class index; a name outside `label_names` fails at `where`."""
    label_ids = {name: index for index, name in enumerate(label_names)}

    def encode(label: str, where: str) -> int:
        if label not in label_ids:
            raise DataError(f"{where}: label {label!r} is not one of {', '.join(label_names)}")
        return label_ids[label]
    return encode


def jsonl_line(text: str, label: str) -> dict[str, Any]:
    """The JSONL line of one example, its target as `read_example` gave it (a label name):
    held-out examples written back as a file."""
    return {"text": text, "label": label}
