"""The `[default: ...]` note of a `train` option whose default depends on what is trained: a
built-in task, a JSONL file (`--data`), or pretrained weights (`--hf-model` on a folder with
model.safetensors), the training presets of `attndeploy.training.config`."""

from __future__ import annotations

from typing import Any

from attndeploy.training.config import PRETRAINED_DEFAULTS, REAL_TEXT_DEFAULTS, TASK_DEFAULTS

TASK, DATA, PRETRAINED = TASK_DEFAULTS, REAL_TEXT_DEFAULTS, PRETRAINED_DEFAULTS
PRESETS = {defaults.preset: defaults for defaults in (TASK, DATA, PRETRAINED)}


def show(value: Any) -> str:
    return "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def by_data(task: Any, data: Any, pretrained: Any = None) -> str:
    """The help text's note of a default that depends on the data, and with `pretrained` on
    fine-tuning pretrained weights (`--hf-model` on a folder with model.safetensors)."""
    if task == data:
        note = f"{show(task)}"
    else:
        note = f"{show(task)} for a task; {show(data)} for --data"
    if pretrained is not None:
        note += f"; {show(pretrained)} fine-tuning pretrained weights"
    return f"[default: {note}]"


def by_preset(field: str) -> str:
    """`by_data` for a `TrainConfig` field of all three presets."""
    return by_data(getattr(TASK.training, field), getattr(DATA.training, field),
                   getattr(PRETRAINED.training, field))
