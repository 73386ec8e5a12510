"""One gRPC request from text or ids, decoded with the model's own labels and vocabulary.

The tokenizer and label names travel inside the exported ONNX file's metadata, so `infer` needs
only the repository (or an explicit ONNX file / checkpoint) next to the server's URL.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from attndeploy.errors import DataError, ServerError
from attndeploy.serving.client import infer_once
from attndeploy.serving.launch import find_model_onnx


def _metadata(onnx_path: Path) -> dict[str, str]:
    from attndeploy.export.exporter import read_metadata

    return read_metadata(onnx_path)


def infer_request(
    *,
    url: str,
    model: str,
    text: str | None = None,
    ids: Sequence[int] | None = None,
    repo: Path | None = None,
    onnx_path: Path | None = None,
    timeout_s: float = 10.0,
) -> dict[str, Any]:
    """Send one example; return label, scores and (GA-Net) the open tokens."""
    if (text is None) == (ids is None):
        raise DataError("give exactly one of --text or --ids")
    onnx_path = onnx_path or (find_model_onnx(repo, model) if repo is not None else None)
    meta = _metadata(onnx_path) if onnx_path is not None else {}
    labels = json.loads(meta["labels"]) if meta.get("labels") else None
    tokenizer = None
    if meta.get("tokenizer"):
        from attndeploy.data import WordTokenizer

        tokenizer = WordTokenizer.from_dict(json.loads(meta["tokenizer"]))
    if text is not None:
        if tokenizer is None:
            raise ServerError(
                f"no vocabulary for model {model!r}: pass --repo with the packaged model (or "
                "--onnx) so --text can be tokenized, or send --ids"
            )
        token_ids = tokenizer.encode(text)
        if not token_ids:
            raise DataError("the text has no tokens")
    else:
        token_ids = [int(i) for i in ids]
        if not token_ids:
            raise DataError("--ids is empty")
    input_ids = np.asarray([token_ids], dtype=np.int64)  # [1, T]
    outputs = infer_once(url, model, input_ids, np.ones_like(input_ids), timeout_s=timeout_s)
    logits = outputs["logits"][0]  # [C] or [T, C]
    tokens = tokenizer.decode(token_ids) if tokenizer is not None else [str(i) for i in token_ids]
    result: dict[str, Any] = {"model": model, "tokens": tokens, "logits": logits.tolist()}
    predicted = logits.argmax(-1)
    if logits.ndim == 1:
        result["label"] = labels[int(predicted)] if labels else int(predicted)
        shifted = np.exp(logits - logits.max())
        probabilities = shifted / shifted.sum()
        result["scores"] = {
            (labels[i] if labels else str(i)): float(p) for i, p in enumerate(probabilities)
        }
    else:
        result["tags"] = [labels[int(t)] if labels else int(t) for t in predicted]
    if "gates" in outputs:
        gates = outputs["gates"][0].astype(bool)
        result["gates"] = gates.tolist()
        result["open_tokens"] = [tok for tok, g in zip(tokens, gates, strict=True) if g]
    return result
