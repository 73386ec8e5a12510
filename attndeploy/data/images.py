"""Image data: a folder of class subfolders (torchvision's `ImageFolder` layout), IDX files
(MNIST, Fashion-MNIST), and the preprocessing measured on the training images.

    DIR/<class>/<any name>.png|.jpg|.jpeg        one subfolder per class, sorted by name
    DIR/train/<class>/...  DIR/test/<class>/...   a fixed split: `test` is the held-out part

`load_image_folder` decodes every image to uint8 [N, C, H, W]. The size and the channel count
are those of the first image (sorted order) unless given; every other image must match, or is
resized when `resize` is asked for. `Preprocessing` (`pixels.py`) then records them with the
per-channel mean and std of the training part, and the checkpoint keeps it: prediction reads it
back, never re-guesses it.

Letters: N images, C channels, H height, W width.
"""

from __future__ import annotations

import gzip
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attndeploy.errors import DataError
from attndeploy.families.image_classification.pixels import (
    IMAGE_SUFFIXES,
    MODES,
    Preprocessing,
    read_image_file,
)

IDX_IMAGES, IDX_LABELS = 0x00000803, 0x00000801  # uint8, 3 dims / uint8, 1 dim
SPLIT_FOLDERS = ("test", "train")
MAX_IDX_BYTES = 1 << 31


@dataclass
class ImageSet:
    """pixels uint8 [N, C, H, W]; labels int64 [N] (indices into class_names); where each came
    from (file paths, for messages and `held-out` lists)."""

    pixels: np.ndarray
    labels: np.ndarray
    class_names: tuple[str, ...]
    sources: list[str]

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, index: np.ndarray) -> ImageSet:
        return ImageSet(self.pixels[index], self.labels[index], self.class_names,
                        [self.sources[i] for i in index.tolist()])


def class_folders(folder: Path) -> list[Path]:
    """The class subfolders of `folder`, sorted by name; DataError unless there are >= 2 and each
    holds an image."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"{folder}: no such image folder")
    classes = sorted((p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")),
                     key=lambda p: p.name)
    if len(classes) < 2:
        raise DataError(f"{folder}: an image folder holds one subfolder per class (at least 2); "
                        f"found {len(classes)}")
    for path in classes:
        if not image_files(path):
            raise DataError(f"{path}: a class folder without PNG or JPEG images")
    return classes


def image_files(folder: Path) -> list[Path]:
    """The PNG and JPEG files directly in `folder`, sorted by name."""
    return sorted((p for p in Path(folder).iterdir()
                   if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES), key=lambda p: p.name)


def is_split_folder(folder: Path) -> bool:
    """`folder` holds exactly `train/` and `test/`, each a folder of class folders."""
    names = sorted(p.name for p in Path(folder).iterdir()
                   if p.is_dir() and not p.name.startswith("."))
    return names == sorted(SPLIT_FOLDERS) and all(
        any(child.is_dir() for child in (Path(folder) / name).iterdir())
        for name in SPLIT_FOLDERS)


def load_image_folder(folder: Path, *, channels: int | None = None,
                      size: tuple[int, int] | None = None, resize: bool = False,
                      class_names: Sequence[str] | None = None) -> ImageSet:
    """Every image of `folder`'s class subfolders, decoded (see the module docstring).

    channels: 1 or 3; default: 1 when the first image is grey (mode L), else 3.
    size: (height, width); default: the first image's. With `class_names` (a checkpoint's), the
    folder's classes must be among them and keep their indices."""
    classes = class_folders(folder)
    names = tuple(p.name for p in classes) if class_names is None else tuple(class_names)
    unknown = [p.name for p in classes if p.name not in names]
    if unknown:
        raise DataError(f"{folder}: classes {unknown} are not the model's ({', '.join(names)})")
    files = [(path, names.index(cls.name)) for cls in classes for path in image_files(cls)]
    if channels is None or size is None:
        first_channels, first_size = _first_image(files[0][0])
        channels = first_channels if channels is None else channels
        size = first_size if size is None else size
    if channels not in MODES:
        raise DataError(f"channels must be 1 or 3, got {channels!r}")
    pixels = np.empty((len(files), channels, *size), dtype=np.uint8)  # [N, C, H, W]
    for row, (path, _) in enumerate(files):
        pixels[row] = read_image_file(path, channels, size, resize=resize)
    labels = np.array([label for _, label in files], dtype=np.int64)
    return ImageSet(pixels, labels, names, [str(path) for path, _ in files])


def _first_image(path: Path) -> tuple[int, tuple[int, int]]:
    """(channels, (height, width)) of an image as it stands: 1 for grey, else 3."""
    from PIL import Image

    try:
        with Image.open(path) as image:
            return (1 if image.mode in ("L", "1", "LA", "I", "I;16") else 3,
                    (image.height, image.width))
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: cannot decode the image ({exc})") from None


def split_images(images: ImageSet, eval_fraction: float, seed: int) -> tuple[ImageSet, ImageSet]:
    """(training, held-out): a seeded shuffle, `eval_fraction` of each class held out (at least
    one image of a class with two or more)."""
    if not 0.0 < eval_fraction < 1.0:
        raise DataError(f"eval_fraction must be in (0, 1), got {eval_fraction}")
    rng = np.random.default_rng(seed)
    held: list[int] = []
    for label in np.unique(images.labels).tolist():
        members = np.flatnonzero(images.labels == label)
        rng.shuffle(members)
        take = min(len(members) - 1, max(1, round(len(members) * eval_fraction)))
        held.extend(members[:take].tolist())
    held_mask = np.zeros(len(images), dtype=bool)
    held_mask[held] = True
    if held_mask.all() or not held_mask.any():
        raise DataError("too few images to hold some out: give at least two per class")
    return images.subset(np.flatnonzero(~held_mask)), images.subset(np.flatnonzero(held_mask))


def load_training_images(folder: Path, *, eval_fraction: float, seed: int,
                         channels: int | None = None, size: tuple[int, int] | None = None,
                         resize: bool = False) -> tuple[ImageSet, ImageSet]:
    """(training, held-out) images of `folder`: its `train/` and `test/` parts when it has them
    (`is_split_folder`), else a split of its class folders (`split_images`)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"{folder}: no such image folder")
    if is_split_folder(folder):
        train = load_image_folder(folder / "train", channels=channels, size=size, resize=resize)
        test = load_image_folder(folder / "test", channels=train.pixels.shape[1],
                                 size=tuple(train.pixels.shape[2:]), resize=resize,
                                 class_names=train.class_names)
        return train, test
    images = load_image_folder(folder, channels=channels, size=size, resize=resize)
    return split_images(images, eval_fraction, seed)


def measure_preprocessing(pixels: np.ndarray, *, resize: bool = False) -> Preprocessing:
    """The `Preprocessing` of training pixels uint8 [N, C, H, W]: their size, channel count,
    and per-channel mean and std on [0, 1] (a constant channel gets std 1)."""
    if pixels.ndim != 4 or pixels.shape[0] == 0:
        raise DataError(f"expected images [N, C, H, W], got shape {list(pixels.shape)}")
    scaled = pixels.astype(np.float64) / 255.0
    mean = scaled.mean(axis=(0, 2, 3))  # [C]
    std = scaled.std(axis=(0, 2, 3))
    std = np.where(std > 1e-6, std, 1.0)
    _, channels, height, width = pixels.shape
    return Preprocessing(channels=channels, height=height, width=width, mean=tuple(mean),
                         std=tuple(std), resize=resize)


# ---------------------------------------------------------------- IDX files (MNIST's format)

def read_idx(path: Path) -> np.ndarray:
    """An IDX file (gzip or plain) -> uint8 [N, H, W] (images, magic 0x803) or [N] (labels,
    magic 0x801); DataError naming the file when its header or size is wrong."""
    path = Path(path)
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as file:
            data = file.read(MAX_IDX_BYTES)
    except (OSError, EOFError) as exc:
        raise DataError(f"{path}: cannot read the IDX file ({exc})") from None
    if len(data) < 8:
        raise DataError(f"{path}: too short for an IDX header")
    magic = int.from_bytes(data[:4], "big")
    if magic not in (IDX_IMAGES, IDX_LABELS):
        raise DataError(f"{path}: not a uint8 IDX file of images or labels (magic {magic:#x})")
    dims = magic & 0xFF
    header = 4 + 4 * dims
    shape = tuple(int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(dims))
    want = int(np.prod(shape))
    if len(data) < header or len(data) - header != want:
        raise DataError(f"{path}: the header says {list(shape)} ({want} bytes) but "
                        f"{max(0, len(data) - header)} follow it")
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(shape)


def read_idx_pair(images: Path, labels: Path) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 [N, H, W], labels uint8 [N]) of two IDX files that belong together."""
    pixels, values = read_idx(images), read_idx(labels)
    if pixels.ndim != 3 or values.ndim != 1 or len(pixels) != len(values):
        raise DataError(f"{images} and {labels} do not pair up: {list(pixels.shape)} images, "
                        f"{list(values.shape)} labels")
    return pixels, values


def write_image_folder(pixels: np.ndarray, labels: np.ndarray, class_names: Sequence[str],
                       staging: Path) -> dict[str, int]:
    """Write uint8 [N, H, W] grey (or [N, H, W, 3]) images as `staging/<class>/<index>.png`
    (`index` zero-padded); returns the count per class. `staging` is a fresh folder the caller
    makes atomic (`attndeploy.output_set.atomic_directory`)."""
    from PIL import Image

    counts = dict.fromkeys(class_names, 0)
    digits = len(str(max(len(pixels) - 1, 0)))
    for name in class_names:
        (staging / name).mkdir(parents=True, exist_ok=True)
    for index, (image, label) in enumerate(zip(pixels, labels, strict=True)):
        name = class_names[int(label)]
        Image.fromarray(np.ascontiguousarray(image)).save(
            staging / name / f"{index:0{digits}d}.png", optimize=False, compress_level=1)
        counts[name] += 1
    return counts
