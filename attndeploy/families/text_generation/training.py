"""text-generation's training part (models layer): a decoder trained on `{"text": ...}` lines.

The family protocol (`attndeploy.training.families`) is written for a label head over an
encoder; a language model has neither, so it trains itself: `train_texts` is this part's hook
(the one `attndeploy train --data FILE` looks for on the file's family) and trains a
`CausalLM` end to end (`attndeploy.models.decoder.fit`). The protocol's head and label
functions refuse with one line saying so; the loss, metrics and baseline are the language
model's (next-token cross-entropy; perplexity, lower is better; an interpolated Kneser-Ney
trigram).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from attndeploy.errors import ConfigError, DataError
from attndeploy.models.decoder.fit import IGNORE, FitOptions, FitResult, train_decoder

JSONL_KEYS = ("text",)
PRIMARY_METRIC = "perplexity"
GREATER_IS_BETTER = False
LABEL_DTYPE = torch.long
MODEL_SIZES = ("variant", "d_model", "n_heads", "n_layers", "d_ff", "max_seq", "dropout")
FIT_FIELDS = ("steps", "batch_size", "learning_rate", "weight_decay", "warmup_steps", "seed",
              "max_seconds", "density_target", "window", "new_learning_rate",
              "evolving_mix_cap", "ramp_steps")
# Fine-tuning a pretrained decoder (`train --hf-model`): a short run at the encoders' pretrained
# rates (5e-5 for the model's own weights, 5e-3 for what the variant added), on 128-token
# windows; the options given on the command line win. Evolving Attention comes in over the
# warm-up to a tenth of its α and β (`evolving_mix_cap`): on SmolLM2 the converted model's
# held-out perplexity is unchanged at 0.1 of the mix (57.3 -> 57.3), 58.4 at 0.2, 70 at 0.5 and
# 180 at the whole mix, which a short fine-tune cannot repair (benchmarks/README.md).
FINE_TUNE = {"steps": 100, "batch_size": 8, "learning_rate": 5e-5, "new_learning_rate": 5e-3,
             "warmup_steps": 10, "window": 128, "evolving_mix_cap": 0.1}


def train_texts(texts: Sequence[str], *, model: dict[str, Any], training: dict[str, Any],
                eval_fraction: float, out: Path, force: bool = False,
                progress: bool = False, start: Any = None,
                given: dict[str, Any] | None = None) -> FitResult:
    """Train a causal LM on `texts` and save it at `out`. `model`: DecoderConfig fields (those
    of MODEL_SIZES are read; the rest are the encoder families' and ignored); `training`:
    the recipe's fields (FIT_FIELDS are read). With `start` (a converted pretrained decoder,
    `attndeploy.models.decoder.fit.Start`, which `train --hf-model` loads), fine-tune it
    instead, with FINE_TUNE's recipe overridden by the options `given`."""
    if start is not None:
        recipe = {**FINE_TUNE, **{k: v for k, v in (given or {}).items() if k in FIT_FIELDS}}
        options = FitOptions(eval_fraction=eval_fraction, **recipe)
        return train_decoder(texts, {}, options, Path(out), force=force, progress=progress,
                             start=start)
    config = {k: v for k, v in model.items() if k in MODEL_SIZES and v is not None}
    options = FitOptions(eval_fraction=eval_fraction,
                         **{k: v for k, v in training.items() if k in FIT_FIELDS})
    return train_decoder(texts, config, options, Path(out), force=force, progress=progress)


def _no_head(*_: Any, **__: Any) -> Any:
    raise ConfigError("a text-generation model is a decoder with no label head: train it "
                      "with `attndeploy train --data FILE` on {\"text\": ...} lines")


build_head = apply_head = check_labels = labels_tensor = batch_labels = join_labels = _no_head


def loss(logits: torch.Tensor, labels: torch.Tensor, label_smoothing: float = 0.0
         ) -> torch.Tensor:
    """Next-token cross-entropy: logits [B, T, V] against labels [B, T] (IGNORE = no target)."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                           ignore_index=IGNORE, label_smoothing=label_smoothing)


def check_label_names(label_names: Sequence[str]) -> None:
    if label_names:
        raise DataError("text-generation lines have no labels: {\"text\": ...}")


def metric_sums(logits: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    counted = labels != IGNORE
    return {"nll": float(loss(logits, labels)) * int(counted.sum()),
            "tokens": float(counted.sum())}


def metrics(sums: dict[str, float]) -> dict[str, float]:
    tokens = sums.get("tokens", 0.0)
    return {"perplexity": math.exp(sums["nll"] / tokens) if tokens else float("nan")}


def fit_baseline(*_: Any, **__: Any) -> dict:
    """The trigram baseline is fitted by `train_texts` (it needs the token windows)."""
    return {}


def read_example(obj: dict[str, Any], where: str) -> tuple[str, None]:
    text = obj.get("text")
    if not isinstance(text, str) or not text.strip():
        raise DataError(f'{where}: expected a non-empty string "text"')
    return text, None


def label_names_of(targets: Sequence[Any], path: Path) -> tuple[str, ...]:
    return ()


def label_encoder(label_names: Sequence[str]):
    return lambda target, where: None


def jsonl_line(text: str, target: Any) -> dict[str, Any]:
    return {"text": text}
