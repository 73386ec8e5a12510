"""An image checkpoint: config.json + model.safetensors, the folder every family writes
(`format`, `model`, `labels`, `metrics`, ...), written all or none. The model section is the
`ImageModelConfig`, whose `head` (`image_classification`) names the family; `preprocessing` is
the `Preprocessing` measured on the training images, which the export copies into its metadata
and prediction reads back.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safetensors.torch import load_file, save_file
from torch import nn

from attndeploy import __version__
from attndeploy.checkpoint_formats import checkpoint_head
from attndeploy.errors import CheckpointError, ConfigError, DataError
from attndeploy.families.image_classification.pixels import Preprocessing
from attndeploy.fsutil import check_replaceable, current_umask, file_sha256
from attndeploy.jsonread import read_json_file
from attndeploy.models.vision.build import build_model
from attndeploy.models.vision.config import HEAD, ImageModelConfig
from attndeploy.output_set import atomic_directory

CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"
FORMAT, FORMAT_VERSION = "attndeploy-checkpoint", 1


@dataclass
class ImageCheckpoint:
    model: nn.Module  # eval mode
    config: ImageModelConfig
    labels: tuple[str, ...]
    preprocessing: Preprocessing
    raw: dict[str, Any]


def is_image_checkpoint(path: Path) -> bool:
    """Whether `path` is a checkpoint folder whose model records this model's head."""
    return checkpoint_head(path) == HEAD


def save_image_model(model: nn.Module, labels: tuple[str, ...], preprocessing: Preprocessing,
                     out: Path, *, metrics: dict[str, Any] | None = None,
                     training: dict[str, Any] | None = None, data: dict[str, Any] | None = None,
                     force: bool = False) -> Path:
    """Write the checkpoint folder `out` (atomically; an existing one only with `force`)."""
    out = Path(out)
    check_replaceable(out, force=force, error=CheckpointError)
    config: ImageModelConfig = model.config
    if len(labels) != config.num_labels:
        raise CheckpointError(f"{len(labels)} labels for a model of {config.num_labels} classes")
    if preprocessing.shape != (config.channels, config.height, config.width):
        raise CheckpointError(f"the preprocessing's {list(preprocessing.shape)} is not the "
                              f"model's input {[config.channels, config.height, config.width]}")
    tensors = {name: t.detach().contiguous().clone() for name, t in model.state_dict().items()}
    document = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "attndeploy_version": __version__,
        "model": config.to_dict(), "labels": list(labels),
        "preprocessing": preprocessing.to_dict(), "data": data or {},
        "training": training or {}, "metrics": metrics or {},
    }
    with atomic_directory(out, replace=force) as staging:
        save_file(tensors, str(staging / WEIGHTS_FILE), metadata={"format": FORMAT})
        os.chmod(staging / WEIGHTS_FILE, 0o666 & ~current_umask())
        document["weights_sha256"] = file_sha256(staging / WEIGHTS_FILE)
        (staging / CONFIG_FILE).write_text(json.dumps(document, indent=2) + "\n")
    return out


def _read_config(path: Path) -> tuple[dict[str, Any], ImageModelConfig, Preprocessing]:
    """config.json read whole, its model config and its preprocessing; CheckpointError naming
    the file otherwise."""
    if not is_image_checkpoint(path):
        raise CheckpointError(f"{path}: not an image checkpoint (head {HEAD!r})")
    raw = read_json_file(path / CONFIG_FILE, error=CheckpointError)
    try:
        config = ImageModelConfig.from_dict(raw["model"])
        preprocessing = Preprocessing.from_dict(raw.get("preprocessing"))
    except (ConfigError, DataError) as exc:  # one line naming the file
        raise CheckpointError(f"{path / CONFIG_FILE}: {exc}") from None
    return raw, config, preprocessing


def load_image_config(path: Path) -> tuple[ImageModelConfig, Preprocessing]:
    """An image checkpoint's model config and preprocessing, without building the model."""
    _, config, preprocessing = _read_config(Path(path))
    return config, preprocessing


def load_image_model(path: Path) -> ImageCheckpoint:
    """The model (eval mode), labels and preprocessing of an image checkpoint; CheckpointError
    naming what is wrong otherwise."""
    path = Path(path)
    raw, config, preprocessing = _read_config(path)
    labels = raw.get("labels")
    if not (isinstance(labels, list) and len(labels) == config.num_labels
            and all(isinstance(label, str) for label in labels)):
        raise CheckpointError(f"{path / CONFIG_FILE}: labels must be {config.num_labels} names")
    digest = raw.get("weights_sha256")
    if digest is not None and (path / WEIGHTS_FILE).is_file() and (
            file_sha256(path / WEIGHTS_FILE) != digest):
        raise CheckpointError(f"{path / WEIGHTS_FILE} is not the file config.json records "
                              "(its sha256 differs): the checkpoint was changed or mixed up")
    try:
        tensors = load_file(str(path / WEIGHTS_FILE))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path / WEIGHTS_FILE}: unreadable weights ({exc})") from None
    model = build_model(config)
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    if missing or unexpected:
        raise CheckpointError(f"{path}: weights do not fit the config (missing "
                              f"{sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]})")
    model.eval()
    return ImageCheckpoint(model, config, tuple(labels), preprocessing, raw)
