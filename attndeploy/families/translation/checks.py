"""translation's checks part (`attndeploy.validate.families` describes the protocol) and its
hooks for `attndeploy export` and `attndeploy validate` on a translation checkpoint.

Every position of the decoder's `logits` [batch, seq, vocab] is a decision (the next target
token there), so two runs agree at a position when they choose the same token.
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


def describe_checkpoint(checkpoint: Path) -> dict[str, Any]:
    """`attndeploy info CKPT` for a translation checkpoint: its model, training summary and
    metrics, the model's BLEU and chrF beside the retrieval and copy baselines'."""
    from attndeploy.models.seq2seq.checkpoint import load_seq2seq

    loaded = load_seq2seq(Path(checkpoint))
    metrics = loaded.raw.get("metrics", {})
    side_by_side = {f"{metric} (model / retrieval / copy)": " / ".join(
        str(metrics.get(f"{prefix}{metric}", "-")) for prefix in ("", "baseline_", "copy_"))
        for metric in ("bleu", "chrf")}
    return {"path": str(checkpoint), "family": "translation", **side_by_side,
            "model": loaded.raw["model"],
            "parameters": sum(p.numel() for p in loaded.model.parameters()),
            "vocabulary_size": len(loaded.tokenizer),
            "training": loaded.raw.get("training", {}), "metrics": metrics}


def export_checkpoint(checkpoint: Path, out: Path, **options: Any) -> dict[str, Any]:
    """`attndeploy export CKPT --out FOLDER` for a translation model: the encoder and the
    decoder graph with its cache, fp32, opset 18, functions kept (the encoder exports' options
    are refused)."""
    from attndeploy.errors import ExportError
    from attndeploy.export.seq2seq import export_checkpoint as export

    given = sorted(f"--{name.replace('_', '-')}" for name, value in options.items()
                   if value not in (None, False))
    if given:
        raise ExportError(f"{', '.join(given)} does not apply to a translation model yet: it "
                          "exports in fp32 with opset 18")
    return export(Path(checkpoint), Path(out)).summary()


def validate_checkpoint(checkpoint: Path, export: Path, **options: Any) -> Any:
    """`attndeploy validate CKPT EXPORT_FOLDER` (`attndeploy.validate.seq2seq`): its report,
    truthy when every check passed."""
    from attndeploy.validate.seq2seq import validate_checkpoint as validate

    return validate(Path(checkpoint), Path(export), **options)
