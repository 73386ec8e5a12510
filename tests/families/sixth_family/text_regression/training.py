"""text-regression's training part: a pooled head with one output, mean squared error on one
float per text, RMSE and Pearson r, the mean predictor as its baseline, and JSONL lines
`{"text": ..., "value": float}`.

The protocol every family's training part follows is in `attndeploy.training.families`. This
module sits at the model layer: the checkpoint reader builds its head.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attndeploy.data.jsonl import text_of
from attndeploy.errors import DataError
from attndeploy.models.heads import PoolingClassifier
from attndeploy.variants.api import LayerContext

LABEL_NAMES = ("value",)  # the one output's name

# ----------------------------------------------------------------------------- the model


def build_head(config: Any, width: int, gated: bool) -> nn.Module:
    """Additive attention pooling then a linear layer to one output (config.num_labels == 1)."""
    return PoolingClassifier(width, config.pool_hidden, config.num_labels, gated=gated)


def apply_head(head: nn.Module, h: Tensor, context: LayerContext) -> tuple[Tensor, Tensor | None]:
    """h [B, T, D] -> (logits [B, 1]: the predicted value, the gates the pooling applied)."""
    return head(h, context)


def loss(logits: Tensor, labels: Tensor, label_smoothing: float = 0.0) -> Tensor:
    """Mean squared error of logits [B, 1] against values [B] (label smoothing has no meaning
    here and is ignored)."""
    return F.mse_loss(logits.squeeze(-1), labels)


# ----------------------------------------------------------------------------- labels

LABEL_DTYPE = torch.float32  # one value per example: float32 [N]


def check_label_names(label_names: tuple[str, ...]) -> None:
    if tuple(label_names) != LABEL_NAMES:
        raise DataError(f"a text regression model has one output, {LABEL_NAMES[0]!r}; "
                        f"got label_names {label_names!r}")


def check_labels(labels: Tensor, attention_mask: Tensor, num_labels: int) -> None:
    """labels float32 [N], every one finite."""
    if labels.shape != (attention_mask.shape[0],):
        raise DataError(f"regression labels must be [N] = [{attention_mask.shape[0]}]; "
                        f"got {tuple(labels.shape)}")
    if not torch.isfinite(labels).all():
        raise DataError("regression labels must be finite numbers")


def labels_tensor(values: Sequence[float], width: int) -> Tensor:
    return torch.tensor(list(values), dtype=torch.float32)  # [N]


def batch_labels(labels: Tensor, width: int) -> Tensor:
    return labels  # [B]


def join_labels(first: Tensor, second: Tensor, width: int) -> Tensor:
    return torch.cat([first, second])  # [N1 + N2]


# ----------------------------------------------------------------------------- evaluation

PRIMARY_METRIC = "rmse"
GREATER_IS_BETTER = False


def metric_sums(logits: Tensor, labels: Tensor) -> dict[str, float]:
    """The sums RMSE and Pearson r are computed from (in float64)."""
    x = logits.squeeze(-1).double()  # [B] predictions
    y = labels.double()  # [B]
    return {"n": float(y.numel()), "squared_error": float(((x - y) ** 2).sum()),
            "x": float(x.sum()), "y": float(y.sum()), "xx": float((x * x).sum()),
            "yy": float((y * y).sum()), "xy": float((x * y).sum())}


def _pearson(s: dict[str, float]) -> float:
    n = s.get("n", 0.0)
    if n < 2:
        return 0.0
    cov = s["xy"] - s["x"] * s["y"] / n
    var_x = s["xx"] - s["x"] ** 2 / n
    var_y = s["yy"] - s["y"] ** 2 / n
    if var_x <= 0 or var_y <= 0:
        return 0.0  # a constant prediction (or constant values) correlates with nothing
    return cov / math.sqrt(var_x * var_y)


def metrics(sums: dict[str, float]) -> dict[str, float]:
    n = max(1.0, sums.get("n", 0.0))
    return {"rmse": math.sqrt(sums.get("squared_error", 0.0) / n), "pearson": _pearson(sums)}


def fit_baseline(fit_docs: Sequence[Sequence[str]], fit_labels: Sequence[Tensor],
                 eval_docs: Sequence[Sequence[str]], eval_labels: Tensor,
                 label_names: tuple[str, ...]) -> dict[str, Any]:
    """The mean predictor: every held-out text gets the training values' mean."""
    mean = float(torch.cat(list(fit_labels)).double().mean())
    errors = eval_labels.double() - mean
    return {"baseline": "mean", "baseline_rmse": float(errors.pow(2).mean().sqrt()),
            "baseline_mean": mean}


# ----------------------------------------------------------------------------- JSONL files

JSONL_KEYS = ("text", "value")


def read_example(obj: dict[str, Any], where: str) -> tuple[str, float]:
    for key in JSONL_KEYS:
        if key not in obj:
            raise DataError(f"{where}: missing {key!r}")
    text, value = text_of(obj, where), obj["value"]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise DataError(f"{where}: 'value' must be a finite number; got {json.dumps(value)}")
    return text, float(value)


def label_names_of(targets: Sequence[float], path: Any) -> tuple[str, ...]:
    if len(set(targets)) < 2:
        raise DataError(f"{path}: every value is the same; a regression needs values that vary")
    return LABEL_NAMES


def label_encoder(label_names: tuple[str, ...]) -> Callable[[float, str], float]:
    def encode(value: float, where: str) -> float:
        return value
    return encode


def jsonl_line(text: str, value: float) -> dict[str, Any]:
    return {"text": text, "value": value}
