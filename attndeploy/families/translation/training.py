"""translation's training part (models layer): an encoder-decoder trained on
`{"source": ..., "target": ...}` lines.

Like text-generation's, it trains the whole model itself: `train_texts` is the hook `attndeploy
train --data FILE` hands the file's sources (and, as `targets`, its targets) to, and trains a
`Seq2Seq` end to end (`attndeploy.models.seq2seq.fit`). The protocol's head and label functions
refuse with one line; its metrics are BLEU and chrF (greater is better) beside the TF-IDF
retrieval baseline (`baseline_bleu`) and copying the source (`copy_bleu`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from attndeploy.errors import ConfigError, DataError
from attndeploy.models.seq2seq.fit import FitOptions, FitResult, train_translation

JSONL_KEYS = ("source", "target")
PRIMARY_METRIC = "bleu"
GREATER_IS_BETTER = True
LABEL_DTYPE = torch.long
# `train` options read: --d-model, --heads, --layers (encoder and decoder alike), --ffn,
# --dropout, --max-seq (the longest source and target, in subword tokens).
SIZES = {"d_model": "d_model", "n_heads": "n_heads", "d_ff": "d_ff", "dropout": "dropout"}
FIT_FIELDS = ("steps", "batch_size", "learning_rate", "weight_decay", "warmup_steps", "seed",
              "max_seconds", "label_smoothing")


def train_texts(texts: Sequence[str], *, targets: Sequence[str] | None = None,
                model: dict[str, Any], training: dict[str, Any], eval_fraction: float,
                out: Path, force: bool = False, progress: bool = False) -> FitResult:
    """Train a translation model on (texts[i], targets[i]) and save it at `out`."""
    if targets is None or len(targets) != len(texts):
        raise DataError('translation trains on {"source": ..., "target": ...} lines: the '
                        "targets did not reach the trainer")
    config = {ours: model[theirs] for theirs, ours in SIZES.items()
              if model.get(theirs) is not None}
    if model.get("variant") is not None:
        config["variant"] = model["variant"]
    if model.get("n_layers") is not None:
        config["encoder_layers"] = config["decoder_layers"] = model["n_layers"]
    if model.get("max_seq") is not None:
        config["max_source"] = config["max_target"] = model["max_seq"]
    options = FitOptions(eval_fraction=eval_fraction,
                         **{k: v for k, v in training.items() if k in FIT_FIELDS})
    return train_translation(list(zip(texts, targets, strict=True)), config, options, Path(out),
                             force=force, progress=progress)


def read_pairs(path: Path) -> list[tuple[str, str]]:
    """Every (source, target) of a JSONL file, by this family's reader (DataError naming the
    line)."""
    pairs = []
    with open(path, encoding="utf-8") as lines:
        for lineno, line in enumerate(lines, start=1):
            if line.strip():
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DataError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from None
                pairs.append(read_example(obj, f"{path}:{lineno}"))
    return pairs


def _no_head(*_: Any, **__: Any) -> Any:
    raise ConfigError('a translation model is an encoder-decoder with no label head: train it '
                      'with `attndeploy train --data FILE` on {"source": ..., "target": ...} '
                      "lines")


build_head = apply_head = check_labels = labels_tensor = batch_labels = join_labels = _no_head


def loss(logits: torch.Tensor, labels: torch.Tensor, label_smoothing: float = 0.0
         ) -> torch.Tensor:
    """Target-token cross-entropy: logits [B, T, V] against labels [B, T] (-100: none)."""
    from attndeploy.models.seq2seq.model import label_smoothed_loss

    return label_smoothed_loss(logits, labels, label_smoothing, -100)


def check_label_names(label_names: Sequence[str]) -> None:
    if label_names:
        raise DataError('translation lines have no labels: {"source": ..., "target": ...}')


def metric_sums(logits: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    raise ConfigError("translation is scored on decoded text (BLEU, chrF) by its own trainer")


def metrics(sums: dict[str, float]) -> dict[str, float]:
    raise ConfigError("translation is scored on decoded text (BLEU, chrF) by its own trainer")


def fit_baseline(*_: Any, **__: Any) -> dict:
    """The retrieval and copy baselines are measured by `train_texts` (they need the pairs)."""
    return {}


def read_example(obj: dict[str, Any], where: str) -> tuple[str, str]:
    source, target = obj.get("source"), obj.get("target")
    for name, value in (("source", source), ("target", target)):
        if not isinstance(value, str) or not value.strip():
            raise DataError(f'{where}: expected a non-empty string "{name}"')
    return source, target


def label_names_of(targets: Sequence[Any], path: Path) -> tuple[str, ...]:
    return ()


def label_encoder(label_names: Sequence[str]):
    return lambda target, where: target


def jsonl_line(text: str, target: Any) -> dict[str, Any]:
    return {"source": text, "target": target}
