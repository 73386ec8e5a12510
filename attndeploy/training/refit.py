"""Refit: after selection on a validation split, train once more on every labelled example.

The selected run only chooses how long to train. A fresh model then trains on the training and
validation examples together for the best epoch + `refit_extra_epochs` epochs, with no selection
(the validation examples are training examples now; GA-Net's calibration still reads their gate
density, which uses no labels). The bag-of-words baseline fits on both sets too, so this is the
like-for-like comparison. Measured in benchmarks/README.md (`train_real.py`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import Any

from attndeploy.training.config import TrainConfig

# What the selected run's summary says about selection; the refit's summary keeps these.
SELECTION_KEYS = ("best_epoch", "best_step", "epochs_done", "steps_done", "stopped_by",
                  "selected_on", "evaluations", "validation_accuracy")


def refit_on_all_examples(
    train_again: Callable[[Any, TrainConfig], Any],
    train_set: Any,
    val_set: Any,
    config: TrainConfig,
    selected: Any,
) -> Any:
    """The refit model's `TrainResult`, or `selected` when the time budget is spent.

    `train_again(examples, config)` trains a fresh model (same seed and architecture) on
    `examples`, the training examples followed by the validation examples, and returns its
    `TrainResult`. The result keeps the selected run's `best_epoch`, `best_step`,
    evaluations and selection summary, and describes the second run in `summary["refit"]`.
    """
    seconds_left = None
    if config.max_seconds is not None:
        seconds_left = config.max_seconds - selected.summary["seconds"]
        if seconds_left <= 0:
            selected.summary["refit"] = {"skipped": "the time budget was spent on selection"}
            return selected
    epochs = math.ceil(selected.metrics["best_epoch"]) + config.refit_extra_epochs
    examples = train_set.concat(val_set)
    refit_config = replace(config, keep_best=False, patience=None, max_epochs=max(epochs, 1),
                           max_seconds=seconds_left, refit=False)
    result = train_again(examples, refit_config)
    refit = {"epochs": refit_config.max_epochs, "examples": len(examples),
             **{key: result.summary[key] for key in ("steps_done", "stopped_by", "seconds")}}
    result.summary.update({key: selected.summary[key] for key in SELECTION_KEYS
                           if key in selected.summary})
    result.summary.update(refit=refit, config=asdict(config),
                          seconds=round(selected.summary["seconds"] + refit["seconds"], 3))
    for key in ("best_epoch", "best_step"):
        result.metrics[key] = selected.metrics[key]
    result.evaluations = selected.evaluations
    return result
