"""A translation checkpoint: config.json + model.safetensors, the folder every family writes
(`format`, `model`, `tokenizer`, `metrics`, ...), written all or none. The model section is the
`Seq2SeqConfig`, whose `head` (`seq2seq`) names the translation family; the tokenizer is the
BPE's `hf-tokenizer` record; a tied output layer is stored once and tied again on load.
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
from attndeploy.generation.hf_tokenizer import HFTokenizer
from attndeploy.jsonread import read_json_file
from attndeploy.models.seq2seq.config import HEAD, Seq2SeqConfig
from attndeploy.models.seq2seq.model import Seq2Seq
from attndeploy.output_set import atomic_directory

CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"
FORMAT, FORMAT_VERSION = "attndeploy-checkpoint", 1
TIED = "lm_head.weight"


@dataclass
class Seq2SeqCheckpoint:
    model: Seq2Seq
    tokenizer: HFTokenizer
    raw: dict[str, Any]


def is_seq2seq_checkpoint(path: Path) -> bool:
    """Whether `path` is a checkpoint folder whose model records this model's head."""
    return checkpoint_head(path) == HEAD


def save_seq2seq(model: Seq2Seq, tokenizer: HFTokenizer, out: Path, *,
                 metrics: dict[str, Any] | None = None, training: dict[str, Any] | None = None,
                 data: dict[str, Any] | None = None, force: bool = False) -> Path:
    out = Path(out)
    check_replaceable(out, force=force, error=CheckpointError)
    tensors = {name: t.detach().contiguous().clone() for name, t in model.state_dict().items()
               if not (model.config.tie_embeddings and name == TIED)}
    config = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "attndeploy_version": __version__,
        "model": model.config.to_dict(), "labels": [], "tokenizer": tokenizer.to_dict(),
        "data": data or {}, "training": training or {}, "metrics": metrics or {},
    }
    with atomic_directory(out, replace=force) as staging:
        save_file(tensors, str(staging / WEIGHTS_FILE), metadata={"format": FORMAT})
        os.chmod(staging / WEIGHTS_FILE, 0o666 & ~current_umask())
        config["weights_sha256"] = file_sha256(staging / WEIGHTS_FILE)
        (staging / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    return out


def load_seq2seq(path: Path) -> Seq2SeqCheckpoint:
    """The model (eval mode) and tokenizer of a translation checkpoint; CheckpointError
    otherwise."""
    path = Path(path)
    if not is_seq2seq_checkpoint(path):
        raise CheckpointError(f"{path}: not a translation checkpoint (head {HEAD!r})")
    raw = read_json_file(path / CONFIG_FILE, error=CheckpointError)
    config = Seq2SeqConfig.from_dict(raw["model"])
    digest = raw.get("weights_sha256")
    if digest is not None and (path / WEIGHTS_FILE).is_file() and (
            file_sha256(path / WEIGHTS_FILE) != digest):
        raise CheckpointError(f"{path / WEIGHTS_FILE} is not the file config.json records "
                              "(its sha256 differs): the checkpoint was changed or mixed up")
    try:
        tensors = load_file(str(path / WEIGHTS_FILE))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path / WEIGHTS_FILE}: unreadable weights ({exc})") from None
    model = Seq2Seq(config)
    if config.tie_embeddings:
        tensors[TIED] = tensors["token_embedding.weight"]
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    if missing or unexpected:
        raise CheckpointError(f"{path}: weights do not fit the config (missing "
                              f"{sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]})")
    model.eval()
    return Seq2SeqCheckpoint(model, HFTokenizer.from_dict(raw["tokenizer"]), raw)
