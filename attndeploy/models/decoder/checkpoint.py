"""A decoder checkpoint: config.json + model.safetensors, the folder every family writes
(`attndeploy.checkpoint`'s format: `format`, `model`, `tokenizer`, `metrics`...), written all or
none (`output_set.atomic_directory`). The model section is the `DecoderConfig`, whose `head`
(`causal_lm`) names the text-generation family; a tied LM head is stored once (the token
embedding) and tied again on load.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safetensors.torch import load_file, save_file

from attndeploy import __version__
from attndeploy.checkpoint_formats import checkpoint_head
from attndeploy.errors import CheckpointError
from attndeploy.fsutil import check_replaceable, current_umask, file_sha256
from attndeploy.generation.tokenizer import LMTokenizer, tokenizer_from_record
from attndeploy.jsonread import read_json_file
from attndeploy.models.decoder.config import HEAD, DecoderConfig
from attndeploy.models.decoder.model import CausalLM
from attndeploy.output_set import atomic_directory

CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"
FORMAT, FORMAT_VERSION = "attndeploy-checkpoint", 1
TIED = "lm_head.weight"


@dataclass
class DecoderCheckpoint:
    model: CausalLM
    tokenizer: LMTokenizer | None
    raw: dict[str, Any]


def is_decoder_checkpoint(path: Path) -> bool:
    """Whether `path` is a checkpoint folder whose model records this model's head."""
    return checkpoint_head(path) == HEAD


def save_decoder(model: CausalLM, tokenizer: LMTokenizer | None, out: Path, *,
                 metrics: dict[str, Any] | None = None, training: dict[str, Any] | None = None,
                 force: bool = False) -> Path:
    out = Path(out)
    check_replaceable(out, force=force, error=CheckpointError)
    tensors = {name: t.detach().contiguous().clone() for name, t in model.state_dict().items()
               if not (model.config.tie_embeddings and name == TIED)}
    config = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "attndeploy_version": __version__,
        "model": model.config.to_dict(), "labels": [],
        "tokenizer": tokenizer.to_dict() if tokenizer is not None else None,
        "data": {}, "training": training or {}, "metrics": metrics or {},
    }
    with atomic_directory(out, replace=force) as staging:
        save_file(tensors, str(staging / WEIGHTS_FILE), metadata={"format": FORMAT})
        # safetensors writes 0600; a checkpoint gets the modes the umask gives, like every output
        os.chmod(staging / WEIGHTS_FILE, 0o666 & ~current_umask())
        config["weights_sha256"] = file_sha256(staging / WEIGHTS_FILE)
        (staging / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    return out


def load_decoder(path: Path) -> DecoderCheckpoint:
    """The model (eval mode) and tokenizer of a decoder checkpoint; CheckpointError otherwise."""
    path = Path(path)
    try:
        raw = read_json_file(path / CONFIG_FILE, error=CheckpointError)
    except OSError as exc:
        raise CheckpointError(f"{path}: not a readable checkpoint ({exc})") from None
    if not is_decoder_checkpoint(path):
        raise CheckpointError(f"{path}: not a text-generation checkpoint (head {HEAD!r})")
    config = DecoderConfig.from_dict(raw["model"])
    digest = raw.get("weights_sha256")
    if digest is not None and (path / WEIGHTS_FILE).is_file() and (
            file_sha256(path / WEIGHTS_FILE) != digest):
        raise CheckpointError(f"{path / WEIGHTS_FILE} is not the file config.json records "
                              "(its sha256 differs): the checkpoint was changed or mixed up")
    model = CausalLM(config)
    try:
        tensors = load_file(str(path / WEIGHTS_FILE))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path / WEIGHTS_FILE}: unreadable weights ({exc})") from None
    if config.tie_embeddings:
        tensors[TIED] = tensors["token_embedding.weight"]
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    if missing or unexpected:
        raise CheckpointError(f"{path}: weights do not fit the config (missing "
                              f"{sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]})")
    model.eval()
    record = raw.get("tokenizer")
    tokenizer = tokenizer_from_record(record)
    return DecoderCheckpoint(model, tokenizer, raw)
