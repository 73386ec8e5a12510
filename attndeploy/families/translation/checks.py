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
EXPORT_FOLDER = "export"  # `attndeploy export CKPT` writes CKPT/export/ (two graphs), not a file
AGREEMENT = "next-token agreement"


def agreement(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """bool [N, T]: the same next token (argmax over the vocabulary) at each position."""
    return np.argmax(actual, axis=-1) == np.argmax(expected, axis=-1)


def side_by_side(metrics: dict[str, Any]) -> dict[str, str]:
    """BLEU and chrF of the model beside the retrieval and copy baselines', one line each."""
    return {f"{metric} (model / retrieval / copy)": " / ".join(
        str(metrics.get(f"{prefix}{metric}", "-")) for prefix in ("", "baseline_", "copy_"))
        for metric in ("bleu", "chrf")}


def describe_checkpoint(checkpoint: Path) -> dict[str, Any]:
    """`attndeploy info CKPT` for a translation checkpoint: its model, training summary and
    metrics, the model's BLEU and chrF beside the retrieval and copy baselines'."""
    from attndeploy.models.seq2seq.checkpoint import load_seq2seq

    loaded = load_seq2seq(Path(checkpoint))
    metrics = loaded.raw.get("metrics", {})
    return {"path": str(checkpoint), "family": "translation", **side_by_side(metrics),
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


def describe_export(folder: Path) -> dict[str, Any] | None:
    """`attndeploy info EXPORT` for a translation export folder: what its decoder's metadata
    says (variant, the checkpoint's metrics side by side, the model's sizes), no torch; None
    for a folder that is not one (no `decoder_model.onnx`)."""
    import json

    import onnx

    from attndeploy.errors import ModelError

    decoder = Path(folder) / "decoder_model.onnx"
    if not decoder.is_file():
        return None
    try:
        proto = onnx.load(str(decoder), load_external_data=False)
    except Exception as exc:  # onnx raises its own types
        raise ModelError(f"{decoder}: not readable ONNX ({str(exc)[:200]})") from None
    meta = {p.key: p.value for p in proto.metadata_props}
    try:
        config = json.loads(meta.get("attndeploy.config", "{}"))
        metrics = json.loads(meta.get("attndeploy.metrics", "{}"))
    except ValueError as exc:
        raise ModelError(f"{decoder}: unreadable metadata ({exc})") from None
    return {"path": str(folder), "family": meta.get("attndeploy.family", "?"),
            "variant": meta.get("attndeploy.variant", "?"), **side_by_side(metrics),
            "model": config, "metrics": metrics,
            "files": sorted(p.name for p in Path(folder).glob("*.onnx"))}
