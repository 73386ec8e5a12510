"""Tiny image exports for the image-model serving tests, and the image files they send: good
ones made with Pillow from the image tests' classes, and each bad kind the served model refuses
(undecodable bytes, a 16-bit PNG, a 16-bit RGB PNG Pillow would quietly read as 8-bit, another
size, a header claiming 100 megapixels whose pixels are never there)."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import numpy as np
from PIL import Image

from tests.families.image_classification.images import class_image, tiny_config, write_folder

SIZE = 8  # the tiny models take 8x8 grey images
RECIPE = {"steps": 40, "batch_size": 16, "learning_rate": 3e-3, "warmup_steps": 4}


def tiny_export(root: Path, *, variant: str = "standard", trained: bool = False) -> Path:
    """`root/model.onnx`: a tiny ViT of `variant` on the image tests' 3-class folder (8x8
    grey), untrained or trained a few steps, exported by `export_checkpoint`."""
    import torch

    from attndeploy.families.image_classification.checks import export_checkpoint

    folder = write_folder(root / "data", per_class=12 if trained else 3)
    threads = torch.get_num_threads()  # restored: later tests (the golden losses) read it
    torch.set_num_threads(1)
    try:
        if trained:
            from attndeploy.families.image_classification.training import train_folder
            from tests.families.image_classification.images import TINY

            train_folder(folder, model={"variant": variant, **TINY}, training=RECIPE,
                         eval_fraction=0.25, out=root / "ckpt")
        else:
            from attndeploy.data.images import load_image_folder, measure_preprocessing
            from attndeploy.models.vision.build import build_model
            from attndeploy.models.vision.checkpoint import save_image_model

            images = load_image_folder(folder)
            torch.manual_seed(0)
            model = build_model(tiny_config("vit", variant)).eval()
            save_image_model(model, images.class_names, measure_preprocessing(images.pixels),
                             root / "ckpt")
        export_checkpoint(root / "ckpt", root / "model.onnx")
    finally:
        torch.set_num_threads(threads)
    return root / "model.onnx"


def png_bytes(pixels: np.ndarray, format: str = "PNG") -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=format)
    return buffer.getvalue()


def good_image(label: int, seed: int = 1, format: str = "PNG") -> bytes:
    """An 8x8 grey image of class `label` (the tiny models' classes), encoded."""
    return png_bytes(class_image(label, np.random.default_rng(seed), SIZE), format)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return (struct.pack(">I", len(data)) + kind + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))


def raw_png(width: int, height: int, depth: int, color: int, rows: bytes) -> bytes:
    """A PNG written by hand: IHDR (`depth` bits, colour type `color`), one IDAT of `rows`
    (compressed as they are), IEND."""
    header = struct.pack(">IIBBBBB", width, height, depth, color, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(rows))
            + _chunk(b"IEND", b""))


BAD_IMAGES: dict[str, tuple[bytes, str]] = {  # kind: (bytes, what the error says)
    "undecodable": (b"not an image at all", "not a PNG or JPEG image"),
    "16-bit grey": (png_bytes(np.full((SIZE, SIZE), 40000, dtype=np.uint16)),
                    "16-bit PNG"),
    "16-bit RGB": (raw_png(SIZE, SIZE, 16, 2, b"".join(b"\x00" + b"\x00" * SIZE * 6
                                                        for _ in range(SIZE))), "16-bit PNG"),
    "wrong size": (png_bytes(np.zeros((SIZE + 1, SIZE), dtype=np.uint8)),
                   "9x8 (height x width); the model takes 8x8 and resizing is off"),
    # 10,000 x 10,000 by its header; its one IDAT holds 10 bytes: refused before decoding
    "100 megapixels": (raw_png(10_000, 10_000, 8, 0, b"\x00" * 10), "40,000,000-pixel limit"),
}
