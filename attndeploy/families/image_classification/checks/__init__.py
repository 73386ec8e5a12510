"""image-classification's checks part (`attndeploy.validate.families` describes the protocol)
and its hooks for `attndeploy export`, `attndeploy validate` and `attndeploy info` on an image
checkpoint, and the inputs `attndeploy debug compare` and `attndeploy quantize` feed an image
model (`checks.inputs`):

- `debug_checkpoint(checkpoint, export, metadata, shapes, seed)`: the checkpoint's model and random
  images for comparing it with its export, layer by layer;
- `checkpoint_feeds(checkpoint, shapes, seed)` and `random_feeds(metadata, shapes, seed,
  where)`: random images by the preprocessing a checkpoint or an export records (`--shapes`
  are batch sizes);
- `example_feeds(path, metadata, where)`: the labelled images of a folder (quantize `--data`).

One label per image: two runs agree on an image when its logits [C] have the same argmax; on
labelled images the score is the accuracy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from attndeploy.families.image_classification.checks.inputs import (  # noqa: F401 (hooks)
    example_feeds,
    random_feeds,
)

PER_TOKEN_OUTPUTS: tuple[str, ...] = ()
AGREEMENT = "label agreement"
SCORE = "accuracy"
EXAMPLES = "images"  # what quantize --data reads, in its report


def agreement(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """bool [N]: the same label (argmax over the classes) for each image."""
    return np.argmax(actual, axis=-1) == np.argmax(expected, axis=-1)


def score(outputs: Sequence[np.ndarray], gold: Sequence[int]) -> float:
    """Accuracy: the share of images whose label (argmax of its logits [C]) is the gold one."""
    right = [int(np.argmax(row)) == label for row, label in zip(outputs, gold, strict=True)]
    return sum(right) / len(right)


def checkpoint_feeds(checkpoint: Path, shapes: Any, seed: int
                     ) -> tuple[list[dict[str, np.ndarray]], list[str]]:
    """Random images by the preprocessing the checkpoint records (no model is built)."""
    from attndeploy.families.image_classification.checks.inputs import (
        DEBUG_BATCHES,
        batch_feeds,
        parse_batches,
    )
    from attndeploy.models.vision.checkpoint import load_image_config

    _, preprocessing = load_image_config(Path(checkpoint))
    return batch_feeds(preprocessing, parse_batches(shapes, DEBUG_BATCHES, str(checkpoint)),
                       seed)


def debug_checkpoint(checkpoint: Path, export: Path, metadata: Mapping[str, str], shapes: Any,
                     seed: int) -> tuple[Any, list[dict[str, np.ndarray]], list[str]]:
    """(the checkpoint's model in eval mode, random images, their labels) for `debug compare
    CKPT MODEL.onnx`, whose attndeploy `metadata` (keys without the prefix) must be this
    checkpoint's export: an image model's, with the checkpoint's weights (ValidationError
    naming `export` otherwise)."""
    from attndeploy.errors import ValidationError
    from attndeploy.families.image_classification import HEAD
    from attndeploy.families.image_classification.checks.inputs import (
        DEBUG_BATCHES,
        batch_feeds,
        parse_batches,
    )
    from attndeploy.models.vision.checkpoint import load_image_model

    loaded = load_image_model(Path(checkpoint))
    if metadata.get("head") != HEAD:
        raise ValidationError(f"{export} is not an image model (head "
                              f"{metadata.get('head')!r}); {checkpoint} is one: compare its "
                              "own export")
    digest = str(loaded.raw.get("weights_sha256", ""))
    if digest and metadata.get("weights_sha256") not in (None, "", digest):
        raise ValidationError(f"{export} was exported from other weights than {checkpoint} "
                              "(weights sha256 differs); compare the file exported from it")
    feeds, labels = batch_feeds(loaded.preprocessing,
                                parse_batches(shapes, DEBUG_BATCHES, str(checkpoint)), seed)
    return loaded.model, feeds, labels


def describe_checkpoint(checkpoint: Path) -> dict[str, Any]:
    """`attndeploy info CKPT` for an image checkpoint: its model, preprocessing, training
    summary, and its accuracy beside logistic regression's."""
    from attndeploy.models.vision.checkpoint import load_image_model

    loaded = load_image_model(Path(checkpoint))
    metrics = loaded.raw.get("metrics", {})
    return {"path": str(checkpoint), "family": "image-classification",
            "network": loaded.config.network,
            "accuracy (model / logistic regression)": (
                f"{metrics.get('accuracy', '-')} / {metrics.get('baseline_accuracy', '-')}"),
            "model": loaded.raw["model"], "labels": list(loaded.labels),
            "preprocessing": loaded.preprocessing.to_dict(),
            "parameters": sum(p.numel() for p in loaded.model.parameters()),
            "training": loaded.raw.get("training", {}), "metrics": metrics}


def export_checkpoint(checkpoint: Path, out: Path, **options: Any) -> dict[str, Any]:
    """`attndeploy export CKPT [--out FILE]` for an image model: one ONNX file taking
    `pixel_values` [batch, C, H, W] (`checks.export`)."""
    from attndeploy.families.image_classification.checks.export import export_image_checkpoint

    return export_image_checkpoint(Path(checkpoint), Path(out), **options).summary()


def validate_checkpoint(checkpoint: Path, export: Path, **options: Any) -> Any:
    """`attndeploy validate CKPT MODEL.onnx` (`checks.validate`): its report, truthy when every
    check passed."""
    from attndeploy.families.image_classification.checks.validate import validate_image_export

    return validate_image_export(Path(checkpoint), Path(export), **options)
