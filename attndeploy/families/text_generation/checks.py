"""text-generation's checks part (`attndeploy.validate.families` describes the protocol) and
its hooks for `attndeploy export`, `validate` and `info` on a decoder checkpoint.

Every position of a language model's `logits` [batch, seq, vocab] is a decision (the next
token there), so they are per token, and two runs agree at a position when they choose the same
next token. The decoder's own validation (incremental decoding against full recomputation,
ONNX against PyTorch step by step, greedy tokens) is `attndeploy.validate.decoder`; the export
with the cache is `attndeploy.export.decoder`: `export_checkpoint` and `validate_checkpoint`
below are what the commands call for a checkpoint of this family (`cli/family_hooks.py`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

PER_TOKEN_OUTPUTS = ("logits",)
AGREEMENT = "next-token agreement"


def agreement(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """bool [N, T]: the same next token (argmax over the vocabulary) at each position."""
    return np.argmax(actual, axis=-1) == np.argmax(expected, axis=-1)


def export_checkpoint(checkpoint: Path, out: Path, **options: Any) -> dict[str, Any]:
    """`attndeploy export CKPT` for a decoder: one graph with its cache, fp32, opset 18, the
    functions kept, the model's whole context (the encoder exports' options are refused)."""
    from attndeploy.errors import ExportError
    from attndeploy.export.decoder import export_checkpoint as export

    given = sorted(f"--{name.replace('_', '-')}" for name, value in options.items()
                   if value not in (None, False))
    if given:
        raise ExportError(f"{', '.join(given)} does not apply to a text-generation model yet: "
                          "it exports in fp32 with opset 18 and its whole context")

    return export(Path(checkpoint), Path(out)).summary()


def validate_checkpoint(checkpoint: Path, onnx_file: Path, **options: Any) -> Any:
    """`attndeploy validate CKPT MODEL.onnx` for a decoder (`validate.decoder.validate_decoder`):
    its report, truthy when every check passed."""
    from attndeploy.validate.decoder import validate_checkpoint as validate

    return validate(Path(checkpoint), Path(onnx_file), **options)


def describe_checkpoint(checkpoint: Path) -> dict[str, Any]:
    """`attndeploy info CKPT` for a decoder checkpoint, read from its config.json (no
    weights loaded): the held-out perplexity beside the n-gram baseline's, one line."""
    from attndeploy.errors import CheckpointError
    from attndeploy.jsonread import read_json_file

    raw = read_json_file(Path(checkpoint) / "config.json", error=CheckpointError)
    metrics = raw.get("metrics", {}) if isinstance(raw.get("metrics"), dict) else {}

    def shown(key: str) -> str:
        value = metrics.get(key)
        return f"{value:.4g}" if isinstance(value, float) else "-"

    baseline = metrics.get("baseline", "n-gram baseline")
    return {"path": str(checkpoint), "family": "text-generation",
            f"perplexity (model / {baseline})": f"{shown('perplexity')} / "
                                                f"{shown('baseline_perplexity')}",
            "model": raw.get("model", {}), "training": raw.get("training", {}),
            "metrics": metrics}
