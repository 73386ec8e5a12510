"""image-classification's checks part (`attndeploy.validate.families` describes the protocol)
and its hooks for `attndeploy export`, `attndeploy validate` and `attndeploy info` on an image
checkpoint.

One label per image: two runs agree on an image when its logits [C] have the same argmax.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

PER_TOKEN_OUTPUTS: tuple[str, ...] = ()
AGREEMENT = "label agreement"


def agreement(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """bool [N]: the same label (argmax over the classes) for each image."""
    return np.argmax(actual, axis=-1) == np.argmax(expected, axis=-1)


def describe_checkpoint(checkpoint: Path) -> dict[str, Any]:
    """`attndeploy info CKPT` for an image checkpoint: its model, preprocessing, training
    summary, and its accuracy beside logistic regression's."""
    from attndeploy.models.vision.checkpoint import load_image_model

    loaded = load_image_model(Path(checkpoint))
    metrics = loaded.raw.get("metrics", {})
    return {"path": str(checkpoint), "family": "image-classification",
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
