"""Tiny image folders for the image-classification tests: two or three classes a small model
tells apart in a few steps (a bright left half, a bright right half, a bright top half)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

CLASSES = ("left", "right", "top")


def class_image(label: int, rng: np.random.Generator, size: int = 8, channels: int = 1
                ) -> np.ndarray:
    """uint8 [H, W] (grey) or [H, W, 3]: noise with one half of the image bright."""
    pixels = rng.integers(0, 60, size=(size, size, channels)).astype(np.uint8)
    half = size // 2
    region = [(slice(None), slice(0, half)), (slice(None), slice(half, None)),
              (slice(0, half), slice(None))][label]
    pixels[region] = np.clip(pixels[region].astype(int) + 180, 0, 255).astype(np.uint8)
    return pixels[:, :, 0] if channels == 1 else pixels


def write_folder(root: Path, per_class: int = 12, *, size: int = 8, channels: int = 1,
                 classes: tuple[str, ...] = CLASSES, seed: int = 0, suffix: str = ".png") -> Path:
    """`root/<class>/<i><suffix>` for every class; returns root."""
    rng = np.random.default_rng(seed)
    for label, name in enumerate(classes):
        (root / name).mkdir(parents=True, exist_ok=True)
        for index in range(per_class):
            Image.fromarray(class_image(label, rng, size, channels)).save(
                root / name / f"{index:03d}{suffix}")
    return root
