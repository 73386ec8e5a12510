"""The images the tools feed an image model: `debug compare` and `quantize` (their hooks in
this checks part, `checks/__init__.py`).

- Random images (`random_feeds`): uint8 pixels drawn per batch (seeded) and normalised by the
  model's preprocessing, so they are what a decoded image file would be. An image model's
  input size is fixed by its preprocessing, so a "shape" is only a batch size: `--shapes 1,4`
  (a `BxS` form is refused, naming why).
- Labelled images (`example_feeds`): an image folder (one subfolder per class, or `train/` and
  `test/` of them: then the `test/` part, the held-out images), decoded by the preprocessing the
  export records and labelled by its class list; a class the model does not have is refused.

Letters: B batch, C channels, H height, W width.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from attndeploy.errors import DataError, ValidationError
from attndeploy.families.image_classification import PIXEL_VALUES
from attndeploy.families.image_classification.pixels import META_PREPROCESSING, Preprocessing
from attndeploy.jsonread import parse_json

DEBUG_BATCHES = (4,)  # debug compare: one batch
GRID_BATCHES = (1, 4, 16)  # quantize: one image, a few, a full batch
EXAMPLE_BATCH = 32  # labelled images run in batches of this many
PREPROCESSING_KEY = META_PREPROCESSING.removeprefix("attndeploy.")  # without the prefix


def parse_batches(shapes: str | Sequence[Any] | None, default: tuple[int, ...],
                  where: str = "an image model") -> tuple[int, ...]:
    """"1,4" -> (1, 4); None -> `default`. A `BxS` shape is refused: an image model's size is
    its preprocessing's (ValidationError, one line)."""
    if shapes is None:
        return default
    items = ([part.strip() for part in shapes.split(",") if part.strip()]
             if isinstance(shapes, str) else [str(item) for item in shapes])
    batches = []
    for item in items:
        if not item.isdigit() or int(item) < 1:
            raise ValidationError(f"--shapes {item!r}: {where} takes images of the size its "
                                  "preprocessing records, so its shapes are batch sizes "
                                  "(e.g. 1,4)")
        batches.append(int(item))
    if not batches:
        raise ValidationError("--shapes holds no batch size")
    return tuple(batches)


def preprocessing_of(metadata: Mapping[str, str], where: str) -> Preprocessing:
    """The preprocessing an image export records (keys with or without `attndeploy.`)."""
    text = metadata.get(PREPROCESSING_KEY) or metadata.get(META_PREPROCESSING)
    if not text:
        raise ValidationError(f"{where} records no image preprocessing; re-export it with "
                              "attndeploy")
    try:
        return Preprocessing.from_json(text)
    except DataError as exc:
        raise ValidationError(f"{where}: {exc}") from None


def labels_of(metadata: Mapping[str, str], where: str) -> tuple[str, ...]:
    text = metadata.get("labels") or metadata.get("attndeploy.labels") or "[]"
    labels = parse_json(text, f"{where}'s labels metadata", error=ValidationError)
    if not isinstance(labels, list) or not all(isinstance(name, str) for name in labels):
        raise ValidationError(f"{where}: its labels metadata is not a list of names")
    return tuple(labels)


def random_images(preprocessing: Preprocessing, batch: int, seed: int) -> np.ndarray:
    """float32 [batch, C, H, W]: random uint8 pixels, normalised."""
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, size=(batch, *preprocessing.shape), dtype=np.uint8)
    return preprocessing.normalise(pixels)


def batch_feeds(preprocessing: Preprocessing, batches: Sequence[int], seed: int
                ) -> tuple[list[dict[str, np.ndarray]], list[str]]:
    """One feed of random images per batch size (seed + its index), and its label
    (`4 images`)."""
    feeds = [{PIXEL_VALUES: random_images(preprocessing, batch, seed + index)}
             for index, batch in enumerate(batches)]
    return feeds, [f"{batch} image{'s' if batch > 1 else ''}" for batch in batches]


def random_feeds(metadata: Mapping[str, str], shapes: str | Sequence[Any] | None, seed: int,
                 where: str, default: tuple[int, ...] = DEBUG_BATCHES
                 ) -> tuple[list[dict[str, np.ndarray]], list[str]]:
    """Random images for an export, by the preprocessing its metadata records."""
    return batch_feeds(preprocessing_of(metadata, where), parse_batches(shapes, default, where),
                       seed)


def example_feeds(path: Path, metadata: Mapping[str, str], where: str,
                  batch: int = EXAMPLE_BATCH) -> tuple[list[dict[str, np.ndarray]], list[int]]:
    """The labelled images of the folder `path` (module docstring), in feeds of up to `batch`
    images, and each image's gold label index (in feed order). DataError naming the folder
    for anything else."""
    from attndeploy.data.images import is_split_folder, load_image_folder

    path = Path(path)
    if not path.is_dir():
        raise DataError(f"{path}: an image model reads --data as an image folder (one "
                        "subfolder per class)")
    preprocessing = preprocessing_of(metadata, where)
    folder = path / "test" if is_split_folder(path) else path  # test/: the held-out part
    images = load_image_folder(folder, channels=preprocessing.channels,
                               size=(preprocessing.height, preprocessing.width),
                               resize=preprocessing.resize,
                               class_names=labels_of(metadata, where))
    values = preprocessing.normalise(images.pixels)  # [N, C, H, W]
    feeds = [{PIXEL_VALUES: values[start:start + batch]}
             for start in range(0, len(values), batch)]
    return feeds, images.labels.tolist()
