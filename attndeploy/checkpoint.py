"""Checkpoints: a directory with `config.json` and `model.safetensors`. Loading never unpickles.

config.json (format "attndeploy-checkpoint", format_version 1):
  model        ModelConfig.to_dict(): family, variant, every hyperparameter
  labels       label names, index = class id
  tokenizer    the tokenizer record (`to_dict()`: its splitting rule, its vocabulary), or null
  data         where the training data came from (task name and seed, or JSONL path)
  training     the TrainConfig used and the training summary (steps, seconds)
  metrics      held-out metrics (accuracy; GA-Net: density, rescues, rescue_rate)
  weights_sha256  SHA-256 of model.safetensors (exported ONNX files record it too)

model.safetensors records, in its header metadata, the SHA-256 of config.json's description of
the model (`config_sha256` over everything but the notes `data`, `training`, `metrics`,
`attndeploy_version` and `weights_sha256`), so an edit that still fits the weights (n_heads,
alpha, a label renamed) is refused; checkpoints written before it are read without that check.
Until that last check, reading trusts none of config.json: the model sizes
are bounded (`MODEL_LIMITS`) before anything is built, and the safetensors header's tensor names,
shapes and dtypes are compared with those of the configured model built on the meta device (no
memory) before the weights are loaded and the real model is allocated.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from attndeploy import __version__, checkpoint_formats
from attndeploy.config import ModelConfig
from attndeploy.configbase import SIZE_LIMITS, above_limit
from attndeploy.errors import AttnDeployError, CheckpointError
from attndeploy.fsutil import (
    check_replaceable,
    current_umask,
    file_sha256,
)
from attndeploy.jsonread import read_json_file
from attndeploy.models import AttnModel, build_model
from attndeploy.output_set import atomic_directory
from attndeploy.variants.registry import variant_specs

FORMAT = "attndeploy-checkpoint"
FORMAT_VERSION = 1
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
CONFIG_DIGEST_KEY = "config_sha256"  # in the safetensors header metadata
# config.json keys that describe a run rather than the model; everything else is covered.
NOTES = ("data", "training", "metrics", "attndeploy_version", "weights_sha256")

# Bounds on the sizes a config.json may ask for, checked before anything is built (the table
# shared with Hugging Face configs, `configbase.SIZE_LIMITS`). A checkpoint whose tensors really
# are this large is as large on disk.
MODEL_LIMITS: dict[str, int] = SIZE_LIMITS


def sub_limits() -> dict[tuple[str, str], int]:
    """{(variant, sub-config field): largest value}: each variant's `VariantSpec.limits`."""
    return {(spec.name, name): limit for spec in variant_specs()
            for name, limit in spec.limits.items()}


def __getattr__(name: str) -> Any:
    if name == "SUB_LIMITS":  # derived from the variant specs (was a table here)
        return sub_limits()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

# config.json holds the vocabulary (words of at most 100 characters, data/tokenizer.py) and the
# label names; a million words fit in a few tens of MB.
MAX_CONFIG_BYTES = 64 * 1024 * 1024
# The safetensors JSON header: about 150 bytes per tensor, ~20 tensors per layer; 16 MiB holds
# the largest model MODEL_LIMITS allows many times over (safetensors' own bound is 100 MB).
MAX_HEADER_BYTES = 16 * 1024 * 1024

# safetensors dtype codes -> torch dtypes, to name a tensor's dtype the way torch does.
_SAFETENSORS_DTYPES = {
    "BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16,
    "I32": torch.int32, "I64": torch.int64, "F16": torch.float16, "BF16": torch.bfloat16,
    "F32": torch.float32, "F64": torch.float64,
}


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
    return write_checkpoint(
        out_dir, model.state_dict(), model_section=model.config.to_dict(),
        num_labels=model.config.num_labels, label_names=label_names, tokenizer=tokenizer,
        data=data, training=training, metrics=metrics, force=force,
    )


def write_checkpoint(
    out_dir: Path,
    state_dict: dict[str, torch.Tensor],
    *,
    model_section: dict[str, Any],
    num_labels: int,
    label_names: tuple[str, ...] | list[str],
    tokenizer: Any = None,
    vocab_size: int | None = None,
    extra_sections: dict[str, Any] | None = None,
    data: dict[str, Any] | None = None,
    training: dict[str, Any] | None = None,
    metrics: dict[str, Any] | None = None,
    force: bool = False,
) -> Path:
    """The one writer of a checkpoint folder (config.json + model.safetensors), atomically.

    `extra_sections` go into config.json right after `model` (e.g. the Hugging Face `hf`
    section); with `vocab_size`, a tokenizer larger than the model's vocabulary is refused.
    """
    out_dir = Path(out_dir)
    check_replaceable(out_dir, force=force, error=CheckpointError)
    if len(label_names) != num_labels:
        raise CheckpointError(
            f"{len(label_names)} label names for a model with {num_labels} labels"
        )
    if tokenizer is not None and vocab_size is not None and len(tokenizer) > vocab_size:
        raise CheckpointError(f"the tokenizer has {len(tokenizer)} pieces, more than the model's "
                              f"vocab_size {vocab_size}")
    tensors = {name: t.detach().contiguous().clone() for name, t in state_dict.items()}
    config = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "attndeploy_version": __version__,
        "model": model_section,
        **(extra_sections or {}),
        "labels": list(label_names),
        "tokenizer": tokenizer.to_dict() if tokenizer is not None else None,
        "data": data or {},
        "training": training or {},
        "metrics": metrics or {},
    }
    header = {"format": FORMAT, CONFIG_DIGEST_KEY: config_digest(config)}
    with atomic_directory(out_dir, replace=force) as staging:
        save_file(tensors, str(staging / WEIGHTS_FILE), metadata=header)
        # safetensors writes 0600; a checkpoint gets the modes the umask gives, like every output
        os.chmod(staging / WEIGHTS_FILE, 0o666 & ~current_umask())
        config["weights_sha256"] = file_sha256(staging / WEIGHTS_FILE)
        (staging / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    return out_dir


def config_digest(config: dict[str, Any]) -> str:
    """SHA-256 of config.json's description of the model: every key but the `NOTES`, as
    canonical JSON (sorted keys, no spaces), so that re-indenting the file changes nothing."""
    import hashlib

    described = {key: value for key, value in config.items() if key not in NOTES}
    canonical = json.dumps(described, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def check_config_digest(path: Path, raw: dict[str, Any]) -> None:
    """Refuse a config.json whose model description differs from the one the weights record.
    Run after the structural checks, so that an edit the weights cannot hold keeps its more
    precise message; a checkpoint without the record (an older writer) passes."""
    try:
        with safe_open(str(path / WEIGHTS_FILE), framework="pt") as weights:
            recorded = (weights.metadata() or {}).get(CONFIG_DIGEST_KEY)
    except (SafetensorError, OSError) as exc:
        raise CheckpointError(f"{path / WEIGHTS_FILE} is corrupt: {exc}") from exc
    if recorded is not None and recorded != config_digest(raw):
        raise CheckpointError(
            f"{path / CONFIG_FILE} was edited after training: its description of the model "
            f"(hyperparameters, labels, tokenizer) is not the one recorded in {WEIGHTS_FILE}; "
            "only data, training and metrics may be edited"
        )


def read_config(path: Path) -> dict[str, Any]:
    """Parse and check `config.json` of checkpoint directory `path`."""
    path = Path(path)
    if path.is_file():
        hint = (" (an exported model: give the checkpoint folder it was exported from)"
                if path.suffix == ".onnx" else "")
        raise CheckpointError(f"{path} is a file; give a checkpoint folder (config.json + "
                              f"model.safetensors){hint}")
    if not path.is_dir():
        raise CheckpointError(f"checkpoint directory {path} does not exist")
    config_path = path / CONFIG_FILE
    if not config_path.is_file():
        raise CheckpointError(f"{path} is not a checkpoint: {CONFIG_FILE} is missing")
    size = config_path.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise CheckpointError(
            f"{config_path} is {size:,} bytes, more than the {MAX_CONFIG_BYTES:,} a checkpoint "
            "config may take; it is corrupt or not an attndeploy config"
        )
    raw = read_json_file(config_path, error=CheckpointError, max_bytes=MAX_CONFIG_BYTES)
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise CheckpointError(f"{config_path} is not an attndeploy checkpoint config")
    if raw.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{config_path} has format_version {raw.get('format_version')!r}; "
            f"this attndeploy reads version {FORMAT_VERSION}"
        )
    return raw


def _check_model_limits(raw: Any, source: Path) -> None:
    """Refuse sizes beyond MODEL_LIMITS before any model is built (types: ModelConfig's job)."""
    if not isinstance(raw, dict):
        return  # ModelConfig.from_dict says what is wrong

    def check(name: str, value: Any, limit: int) -> None:
        if (problem := above_limit(f"model {name}", value, limit)) is not None:
            raise CheckpointError(f"{source}: {problem}; the config is corrupt or was edited")

    for name, limit in MODEL_LIMITS.items():
        check(name, raw.get(name), limit)
    for (section, name), limit in sub_limits().items():
        sub = raw.get(section)
        if isinstance(sub, dict):
            check(f"{section}.{name}", sub.get(name), limit)


TensorSpec = tuple[tuple[int, ...], str]  # shape and dtype name ("torch.float32")


def _dtype_name(code: str) -> str:
    dtype = _SAFETENSORS_DTYPES.get(code)
    return str(dtype) if dtype is not None else code


def _expected_tensors(config: ModelConfig) -> dict[str, TensorSpec]:
    """Names, shapes and dtypes of the configured model's state dict, with no memory used."""
    with torch.device("meta"):
        model = build_model(config)
    return {name: (tuple(t.shape), str(t.dtype)) for name, t in model.state_dict().items()}


def header_tensors(weights_path: Path) -> dict[str, TensorSpec]:
    """Names, shapes and dtypes from the safetensors header; nothing is loaded."""
    try:
        with open(weights_path, "rb") as handle:
            prefix = handle.read(8)
    except OSError as exc:
        raise CheckpointError(f"cannot read {weights_path}: {exc.strerror}") from exc
    if len(prefix) == 8:
        header_bytes = int.from_bytes(prefix, "little")
        if header_bytes > MAX_HEADER_BYTES:
            raise CheckpointError(
                f"{weights_path} is corrupt: its header claims {header_bytes:,} bytes, more than "
                f"the {MAX_HEADER_BYTES:,} any attndeploy model needs"
            )
    try:
        with safe_open(str(weights_path), framework="pt") as weights:
            found = {}
            for name in weights.keys():
                piece = weights.get_slice(name)
                found[name] = (tuple(piece.get_shape()), _dtype_name(piece.get_dtype()))
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"{weights_path} is corrupt: {exc}") from exc
    return found


def _with_size(config: ModelConfig, name: str, value: int) -> ModelConfig:
    section, _, field_name = name.rpartition(".")
    if not section:
        return config.replace(**{name: value})
    return config.replace(**{section: dataclasses.replace(getattr(config, section),
                                                           **{field_name: value})})


def _size(config: ModelConfig, name: str) -> int:
    section, _, field_name = name.rpartition(".")
    return getattr(getattr(config, section) if section else config, field_name)


def _shaping_fields(config: ModelConfig, tensor: str, axes: set[int] | None) -> list[str]:
    """The size fields of `config` that set tensor `tensor`'s `axes` (None: its shape at all),
    found by doubling each field in turn on the meta device (a failure path only)."""
    base = _expected_tensors(config)[tensor][0]
    names = [*MODEL_LIMITS, *(".".join(key) for key in sub_limits())]
    found = []
    for name in names:
        try:
            shape = _expected_tensors(_with_size(config, name, 2 * _size(config, name)))
        except AttnDeployError:  # e.g. d_model no longer divisible by n_heads
            continue
        other = shape.get(tensor, (base, ""))[0]
        if axes is None or len(other) != len(base):
            changed = other != base
        else:
            changed = any(other[axis] != base[axis] for axis in axes)
        if changed:
            found.append(f"{name} {_size(config, name)}")
    return found


def check_tensors(
    expected: dict[str, TensorSpec], found: dict[str, TensorSpec], source: Path,
    config: ModelConfig | None = None,
) -> None:
    """The first missing, mismatched or unexpected tensor, named (expected order, then sorted);
    with `config`, a wrong shape also names the config sizes that set the disagreeing axes."""
    for name, (shape, dtype) in expected.items():
        if name not in found:
            raise CheckpointError(f"{source}: tensor {name!r} is missing (the config expects it)")
        got_shape, got_dtype = found[name]
        if got_shape != shape or got_dtype != dtype:
            why = ""
            if config is not None and got_shape != shape:
                axes = None  # a different rank: every field that shapes the tensor
                if len(got_shape) == len(shape):
                    axes = {i for i, (a, b) in enumerate(zip(got_shape, shape, strict=True))
                            if a != b}
                fields = _shaping_fields(config, name, axes)
                why = f" (from its {', '.join(fields)})" if fields else ""
            raise CheckpointError(
                f"{source}: tensor {name!r} has shape {list(got_shape)} {got_dtype}, the config "
                f"expects {list(shape)} {dtype}{why}"
            )
    extra = sorted(set(found) - set(expected))
    if extra:
        raise CheckpointError(f"{source}: tensor {extra[0]!r} is not part of the configured model")


def read_checkpoint(path: Path) -> Checkpoint:
    """Load a checkpoint directory; the model is in eval mode."""
    from attndeploy.data.tokenizer import tokenizer_from_dict

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
    tag = checkpoint_formats.tag_of(raw)
    if tag is not None:  # another format's checkpoint (e.g. a converted Hugging Face model)
        try:
            read = checkpoint_formats.plugin(checkpoint_formats.READERS, tag)
        except LookupError as exc:
            raise CheckpointError(f"{path}: {exc}") from None
        checkpoint = read(path, raw, digest)
        check_config_digest(path, raw)
        return checkpoint
    _check_model_limits(raw.get("model"), path / CONFIG_FILE)
    try:
        model_config = ModelConfig.from_dict(raw.get("model"))
        labels = tuple(str(x) for x in raw.get("labels") or ())
        tokenizer = tokenizer_from_dict(raw["tokenizer"]) if raw.get("tokenizer") else None
    except AttnDeployError as exc:
        raise CheckpointError(f"{path / CONFIG_FILE}: {exc}") from exc
    if len(labels) != model_config.num_labels:
        raise CheckpointError(
            f"{path / CONFIG_FILE}: {len(labels)} labels for {model_config.num_labels} classes"
        )
    if tokenizer is not None and len(tokenizer) > model_config.vocab_size:
        raise CheckpointError(
            f"{path / CONFIG_FILE}: the tokenizer has {len(tokenizer)} words, more than the "
            f"model's vocab_size {model_config.vocab_size}"
        )
    # Names and shapes first, from the header and a meta-device model: a config that asks for a
    # model the weights do not hold fails here, before either is allocated.
    check_tensors(_expected_tensors(model_config), header_tensors(weights_path), weights_path,
                   model_config)
    check_config_digest(path, raw)
    try:
        tensors = load_file(str(weights_path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"{weights_path} is corrupt: {exc}") from exc
    model = build_model(model_config, labels)
    model.load_state_dict(tensors, strict=True)
    model.eval()
    return Checkpoint(path, model, model_config, labels, tokenizer, digest, raw)


def load_checkpoint(path: Path) -> AttnModel:
    """The checkpoint's model, in eval mode."""
    return read_checkpoint(path).model
