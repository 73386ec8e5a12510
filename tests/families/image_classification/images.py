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


# The image cases: every variant in both architectures, tiny (8x8 grey images, 2 heads of 8,
# 3 attention layers so an Evolving chain has two convolving layers, ViT patches of 2: 16
# positions; the AA-CNN's quarter-size grid: 4 positions).
VARIANTS = ("standard", "qvi", "ganet", "evolving")
ARCHITECTURES = ("vit", "aacnn")
TINY = {"d_model": 16, "n_heads": 2, "n_layers": 3, "d_ff": 32, "patch_size": 2,
        "conv_channels": 16, "dropout": 0.0}
CASES = [(architecture, variant) for architecture in ARCHITECTURES for variant in VARIANTS]
CASE_IDS = [f"{architecture}-{variant}" for architecture, variant in CASES]
# GA-Net with a per-image budget (`ganet_budget`): ViT 16 positions keep 5, AA-CNN 4 keep 2.
BUDGET = 0.3


def tiny_config(architecture: str = "vit", variant: str = "standard", **changes):
    from attndeploy.models.vision.config import ImageModelConfig

    fields = {"num_labels": 3, "channels": 1, "height": 8, "width": 8, **TINY, **changes}
    return ImageModelConfig(architecture=architecture, variant=variant, **fields)


def image_export(folder: Path, root: Path, architecture: str = "vit", variant: str = "standard",
                 seed: int = 0) -> tuple[Path, Path]:
    """(checkpoint, export) of an untrained tiny model with the preprocessing of `folder`'s
    images (its `train/` part when it has one), exported by the family's hook."""
    import torch

    from attndeploy.data.images import is_split_folder, load_image_folder, measure_preprocessing
    from attndeploy.families.image_classification import checks
    from attndeploy.models.vision.build import build_model
    from attndeploy.models.vision.checkpoint import save_image_model

    images = load_image_folder(folder / "train" if is_split_folder(folder) else folder)
    torch.manual_seed(seed)
    model = build_model(tiny_config(architecture, variant)).eval()
    name = f"{architecture}_{variant}_{seed}"
    checkpoint = save_image_model(model, images.class_names,
                                  measure_preprocessing(images.pixels), root / f"ckpt_{name}")
    checks.export_checkpoint(checkpoint, root / f"{name}.onnx")
    return checkpoint, root / f"{name}.onnx"
