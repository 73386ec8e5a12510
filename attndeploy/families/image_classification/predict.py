"""Label image files with an exported image model in this process: onnxruntime, Pillow and
numpy, no torch (what `attndeploy predict IMAGE...` runs).

The export's metadata says everything: the preprocessing (`attndeploy.preprocessing`: size,
channels, mean and std, whether to resize) and the labels. Each image is decoded and normalised
by it (`pixels.model_inputs`) and the logits decoded by the family's runtime part: one record
per image, `{"image", "label", "logits", "probabilities"}` (logits and probabilities by label).
A file that cannot be read or decoded is one DataError naming it; nothing is printed for a
batch that failed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attndeploy.errors import ModelError
from attndeploy.families.image_classification import HEAD, PIXEL_VALUES, runtime
from attndeploy.families.image_classification.pixels import (
    META_PREPROCESSING,
    Preprocessing,
    model_inputs,
)
from attndeploy.runtime.names import META_HEAD, META_LABELS
from attndeploy.runtime.sessions import create_session

DEFAULT_BATCH = 32


class ImageClassifier:
    """An exported image model, ready to label image files."""

    def __init__(self, model: Path | str, *, threads: int | None = None) -> None:
        self.path = Path(model)
        if not self.path.is_file():
            raise ModelError(f"{self.path}: no such ONNX file")
        self.session = create_session(str(self.path), threads=threads)
        metadata = self.session.get_modelmeta().custom_metadata_map
        if metadata.get(META_HEAD) != HEAD:
            raise ModelError(f"{self.path}: not an image model (head "
                             f"{metadata.get(META_HEAD)!r}, expected {HEAD!r})")
        try:
            self.preprocessing = Preprocessing.from_json(metadata[META_PREPROCESSING])
            self.labels = tuple(json.loads(metadata[META_LABELS]))
        except (KeyError, ValueError) as exc:
            raise ModelError(f"{self.path}: its image metadata is incomplete ({exc})") from None

    def predict(self, images: Sequence[Path | str], *, batch_size: int = DEFAULT_BATCH
                ) -> list[dict[str, Any]]:
        """One record per image file, in order (see the module docstring)."""
        records: list[dict[str, Any]] = []
        for start in range(0, len(images), batch_size):
            chunk = list(images[start:start + batch_size])
            values = model_inputs(chunk, self.preprocessing)  # [b, C, H, W]
            (logits,) = self.session.run(["logits"], {PIXEL_VALUES: values})  # [b, classes]
            rows = runtime.decode(logits, [1] * len(chunk), self.labels)
            records.extend({"image": str(path), **runtime.record(fields, self.labels)}
                           for path, fields in zip(chunk, rows, strict=True))
        return records
