"""One gRPC request from text or ids, decoded with the model's own labels and vocabulary.

The tokenizer and label names travel inside the exported ONNX file's metadata, so `infer` needs
only the repository (or an explicit ONNX file) next to the server's URL. Text is encoded and the
outputs decoded by `attndeploy.runtime.text`, the same code as in-process `predict`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from attndeploy.errors import DataError, ServerError
from attndeploy.runtime.metadata import ModelMetadata, parse_metadata
from attndeploy.runtime.text import TextError, decode_batch, encode_text
from attndeploy.serving.client import infer_once
from attndeploy.serving.launch import find_model_onnx


def _metadata(onnx_path: Path) -> ModelMetadata:
    """The model's metadata, read with `onnx` (without the weights; no session, no torch)."""
    from attndeploy.serving.onnx_info import load_onnx_graph

    model = load_onnx_graph(onnx_path)
    return parse_metadata({p.key: p.value for p in model.metadata_props}, str(onnx_path))


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
    meta = _metadata(onnx_path) if onnx_path is not None else None
    tokenizer = meta.tokenizer if meta is not None else None
    if text is not None:
        if meta is None or tokenizer is None:
            raise ServerError(
                f"no vocabulary for model {model!r}: pass --repo with the packaged model (or "
                "--onnx) so --text can be tokenized, or send --ids"
            )
        try:
            encoded = encode_text(tokenizer, text, max_seq=meta.max_seq)
        except TextError as exc:
            raise DataError(f"--text {exc.reason}" + ("; shorten it" if exc.too_long else "")
                            ) from None
        token_ids, tokens = encoded.ids, encoded.tokens
    else:
        token_ids = [int(i) for i in ids]
        if not token_ids:
            raise DataError("--ids is empty")
        tokens = tokenizer.decode(token_ids) if tokenizer is not None else [
            str(i) for i in token_ids]
    input_ids = np.asarray([token_ids], dtype=np.int64)  # [1, T]
    outputs = infer_once(url, model, input_ids, np.ones_like(input_ids), timeout_s=timeout_s)
    logits = outputs["logits"]  # [1, C] or [1, T, C]
    (prediction,) = decode_batch(
        logits, outputs.get("gates"), [tokens], meta.labels if meta is not None else None,
        tagging=logits.ndim == 3,
    )
    result: dict[str, Any] = {"model": model, "tokens": tokens,
                              "logits": prediction.logits.tolist()}
    if prediction.tags is None:
        result["label"] = prediction.label
        result["scores"] = prediction.to_dict()["scores"]
    else:
        result["tags"] = prediction.tags
    if prediction.gates is not None:
        result["gates"] = prediction.gates.tolist()
        result["open_tokens"] = prediction.attended
    return result
