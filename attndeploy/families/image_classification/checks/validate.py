"""Validate an exported image model against its checkpoint:

- `metadata`: the export records the checkpoint's preprocessing, labels and weights, so a
  runtime reading it decodes images as training did;
- `batch N` for each batch size of the grid (1, 2, 7, 16 by default): images of random pixels
  (uint8, normalised by the checkpoint's preprocessing, seeded) through PyTorch and
  onnxruntime give identical labels, logits within `atol`, and (GA-Net) identical gates.

The report's checks are `attndeploy.validate.decoder.DecoderCheck`s.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch

from attndeploy.errors import ValidationError
from attndeploy.families.image_classification import PIXEL_VALUES
from attndeploy.families.image_classification.checks.inputs import random_images
from attndeploy.families.image_classification.pixels import META_PREPROCESSING, Preprocessing
from attndeploy.models.vision.checkpoint import ImageCheckpoint, load_image_model
from attndeploy.runtime.names import META_LABELS, META_WEIGHTS
from attndeploy.runtime.sessions import create_session
from attndeploy.validate.decoder import DecoderCheck, DecoderReport

ATOL = 1e-4
BATCH_GRID = (1, 2, 7, 16)


class ImageReport(DecoderReport):
    """The decoder's report of named checks, for an image model."""

    KIND = "image model"


def check_metadata(loaded: ImageCheckpoint, metadata: dict[str, str]) -> DecoderCheck:
    wrong = []
    try:
        stored = Preprocessing.from_json(metadata.get(META_PREPROCESSING, ""))
    except Exception:  # noqa: BLE001  (absent or unreadable: a mismatch, reported)
        stored = None
    if stored != loaded.preprocessing:
        wrong.append("preprocessing")
    if metadata.get(META_LABELS) != json.dumps(list(loaded.labels)):
        wrong.append("labels")
    if metadata.get(META_WEIGHTS) != str(loaded.raw.get("weights_sha256", "")):
        wrong.append("weights")
    detail = (f"differs from the checkpoint's: {', '.join(wrong)}" if wrong
              else "preprocessing, labels and weights as the checkpoint's")
    return DecoderCheck("metadata", not wrong, float(len(wrong)), 0.0, detail)


def check_batch(model: torch.nn.Module, session: Any, outputs: Sequence[str],
                images: np.ndarray, atol: float) -> DecoderCheck:
    """One batch through PyTorch and onnxruntime: labels, logits, gates."""
    with torch.no_grad():
        want = model(torch.from_numpy(images))
    got = dict(zip(outputs, session.run(list(outputs), {PIXEL_VALUES: images}), strict=True))
    expected = want["logits"].numpy()
    error = float(np.abs(got["logits"] - expected).max())
    same_labels = bool((got["logits"].argmax(-1) == expected.argmax(-1)).all())
    same_gates = "gates" not in got or bool((got["gates"] == want["gates"].numpy()).all())
    detail = f"labels {'identical' if same_labels else 'DIFFER'}"
    if "gates" in got:
        detail += f", gates {'identical' if same_gates else 'DIFFER'}"
    return DecoderCheck(f"batch {len(images)}", error <= atol and same_labels and same_gates,
                        error, atol, detail)


def validate_image_export(checkpoint: Path, export: Path, *, seed: int = 0, atol: float = ATOL,
                          batches: Sequence[int] = BATCH_GRID, **_: Any) -> ImageReport:
    """`attndeploy validate CKPT MODEL.onnx` for an image model (see the module docstring)."""
    loaded = load_image_model(Path(checkpoint))
    export = Path(export)
    if not export.is_file():
        raise ValidationError(f"{export}: no such ONNX file")
    proto = onnx.load(str(export), load_external_data=False)
    metadata = {entry.key: entry.value for entry in proto.metadata_props}
    session = create_session(str(export))
    outputs = [output.name for output in session.get_outputs()]
    report = ImageReport([check_metadata(loaded, metadata)])
    for index, batch in enumerate(batches):
        images = random_images(loaded.preprocessing, batch, seed + index)
        report.checks.append(check_batch(loaded.model, session, outputs, images, atol))
    return report
