"""Checkpoints: a directory with `config.json` and `model.safetensors`. Loading never unpickles.

config.json (format "attndeploy-checkpoint", format_version 1):
  model        ModelConfig.to_dict(): family, variant, every hyperparameter
  labels       label names, index = class id
  tokenizer    WordTokenizer.to_dict() (the vocabulary), or null
  data         where the training data came from (task name and seed, or JSONL path)
  training     the TrainConfig used and the training summary (steps, seconds)
  metrics      held-out metrics (accuracy; GA-Net: density, rescues, rescue_rate)
  weights_sha256  SHA-256 of model.safetensors (exported ONNX files record it too)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from attndeploy import __version__
from attndeploy.config import ModelConfig
from attndeploy.errors import AttnDeployError, CheckpointError
from attndeploy.fsutil import atomic_directory, file_sha256
from attndeploy.models import AttnModel, build_model

FORMAT = "attndeploy-checkpoint"
FORMAT_VERSION = 1
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"


@dataclass(frozen=True)
class Checkpoint:
    """A loaded checkpoint: the model in eval mode plus everything config.json says."""

    path: Path
    model: AttnModel
    model_config: ModelConfig
    label_names: tuple[str, ...]
    tokenizer: Any  # attndeploy.data.WordTokenizer or None
    weights_sha256: str
    metadata: dict[str, Any] = field(repr=False)


def save_checkpoint(
    model: AttnModel,
    out_dir: Path,
    *,
    label_names: tuple[str, ...] | list[str],
    tokenizer: Any = None,
    data: dict[str, Any] | None = None,
    training: dict[str, Any] | None = None,
    metrics: dict[str, Any] | None = None,
    force: bool = False,
) -> Path:
    """Write the checkpoint atomically; an existing directory is replaced only with `force`."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not force:
        raise CheckpointError(f"{out_dir} already exists; pass --force to replace it")
    if len(label_names) != model.config.num_labels:
        raise CheckpointError(
            f"{len(label_names)} label names for a model with {model.config.num_labels} labels"
        )
    tensors = {name: t.detach().contiguous().clone() for name, t in model.state_dict().items()}
    with atomic_directory(out_dir, replace=force) as staging:
        save_file(tensors, str(staging / WEIGHTS_FILE), metadata={"format": FORMAT})
        config = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "attndeploy_version": __version__,
            "model": model.config.to_dict(),
            "labels": list(label_names),
            "tokenizer": tokenizer.to_dict() if tokenizer is not None else None,
            "data": data or {},
            "training": training or {},
            "metrics": metrics or {},
            "weights_sha256": file_sha256(staging / WEIGHTS_FILE),
        }
        (staging / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    return out_dir


def read_config(path: Path) -> dict[str, Any]:
    """Parse and check `config.json` of checkpoint directory `path`."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint directory {path} does not exist")
    config_path = path / CONFIG_FILE
    if not config_path.is_file():
        raise CheckpointError(f"{path} is not a checkpoint: {CONFIG_FILE} is missing")
    try:
        raw = json.loads(config_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{config_path} is not valid JSON: {exc}") from exc
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise CheckpointError(f"{config_path} is not an attndeploy checkpoint config")
    if raw.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{config_path} has format_version {raw.get('format_version')!r}; "
            f"this attndeploy reads version {FORMAT_VERSION}"
        )
    return raw


def _check_tensors(model: AttnModel, tensors: dict[str, torch.Tensor], source: Path) -> None:
    expected = model.state_dict()
    for name, ref in expected.items():
        if name not in tensors:
            raise CheckpointError(f"{source}: tensor {name!r} is missing (the config expects it)")
        got = tensors[name]
        if tuple(got.shape) != tuple(ref.shape) or got.dtype != ref.dtype:
            raise CheckpointError(
                f"{source}: tensor {name!r} has shape {list(got.shape)} {got.dtype}, the config "
                f"expects {list(ref.shape)} {ref.dtype}"
            )
    extra = sorted(set(tensors) - set(expected))
    if extra:
        raise CheckpointError(f"{source}: tensor {extra[0]!r} is not part of the configured model")


def read_checkpoint(path: Path) -> Checkpoint:
    """Load a checkpoint directory; the model is in eval mode."""
    from attndeploy.data import WordTokenizer

    path = Path(path)
    raw = read_config(path)
    weights_path = path / WEIGHTS_FILE
    if not weights_path.is_file():
        raise CheckpointError(f"{path} is not a checkpoint: {WEIGHTS_FILE} is missing")
    digest = file_sha256(weights_path)
    recorded = raw.get("weights_sha256")
    if not isinstance(recorded, str) or not recorded:
        raise CheckpointError(
            f"{path / CONFIG_FILE} records no weights_sha256, so {WEIGHTS_FILE} cannot be verified"
        )
    if recorded != digest:
        raise CheckpointError(
            f"{weights_path} does not match the SHA-256 recorded in {CONFIG_FILE}: "
            "the file is corrupt or was replaced"
        )
    try:
        model_config = ModelConfig.from_dict(raw.get("model"))
        labels = tuple(str(x) for x in raw.get("labels") or ())
        tokenizer = WordTokenizer.from_dict(raw["tokenizer"]) if raw.get("tokenizer") else None
    except AttnDeployError as exc:
        raise CheckpointError(f"{path / CONFIG_FILE}: {exc}") from exc
    if len(labels) != model_config.num_labels:
        raise CheckpointError(
            f"{path / CONFIG_FILE}: {len(labels)} labels for {model_config.num_labels} classes"
        )
    try:
        tensors = load_file(str(weights_path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"{weights_path} is corrupt: {exc}") from exc
    model = build_model(model_config)
    _check_tensors(model, tensors, weights_path)
    model.load_state_dict(tensors, strict=True)
    model.eval()
    return Checkpoint(path, model, model_config, labels, tokenizer, digest, raw)


def load_checkpoint(path: Path) -> AttnModel:
    """The checkpoint's model, in eval mode."""
    return read_checkpoint(path).model
