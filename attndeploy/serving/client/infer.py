"""One request from text or ids, over gRPC or HTTP, decoded with the model's own labels.

Two kinds of served model take a text:

- a text model (`<name>_text`, see `text_model.py`) tokenizes and decodes in the server: the text
  is sent as it is, and its answer (label, logits, GA-Net's attended tokens, a tagger's tags)
  comes back decoded;
- an id model takes token ids: the text is tokenized here with the vocabulary in the exported
  ONNX file's metadata, so `infer` needs the repository (or an explicit ONNX file) next to the
  server's URL, and the outputs are decoded here.

Either way the tokenizer and decoder are `attndeploy.runtime.text`'s, the code of in-process
`predict` (the text model runs a byte-identical copy of it). Which kind a model is comes from its
folder in the repository, or, when the repository does not hold it, from the server's metadata.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from attndeploy.errors import DataError, ServerError
from attndeploy.runtime import DEFAULT_MAX_TEXT_BYTES
from attndeploy.runtime.metadata import ModelMetadata, parse_metadata
from attndeploy.runtime.text import TextError, decode_batch, encode_text, label_names_for, softmax
from attndeploy.serving.client.triton import (
    Protocol,
    TritonRunner,
    as_protocol,
    infer_once,
    infer_texts,
)
from attndeploy.serving.packaging.model_config import LABELS_FILE
from attndeploy.serving.packaging.text_model import (
    ATTENDED,
    LABEL,
    SCORES,
    TEXT,
    TOKENS,
    is_text_config,
    read_config,
)
from attndeploy.serving.server.launch import find_model_onnx


def _metadata(onnx_path: Path) -> ModelMetadata:
    """The model's metadata, read with `onnx` (without the weights; no session, no torch)."""
    from attndeploy.serving.packaging.onnx_info import load_onnx_graph

    model = load_onnx_graph(onnx_path)
    return parse_metadata({p.key: p.value for p in model.metadata_props}, str(onnx_path))


def _is_text_model(url: str | None, model: str, repo: Path | None, timeout_s: float,
                   protocol: Protocol) -> bool:
    """Whether `model` takes `text`: its repository folder says so, else the server does."""
    if repo is not None and (Path(repo) / model).is_dir():
        cfg = read_config(Path(repo) / model)
        return cfg is not None and is_text_config(cfg)
    with TritonRunner(url, model, timeout_s=timeout_s, protocol=protocol) as runner:
        return runner.metadata().input(TEXT) is not None


def _strings(array: np.ndarray) -> list[str]:
    return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in array.tolist()]


def _text_model_result(model: str, text: str, outputs: dict[str, np.ndarray],
                       repo: Path | None) -> dict[str, Any]:
    """The JSON of one text model answer (one row), shaped like the id path's."""
    labels_file = Path(repo) / model / LABELS_FILE if repo is not None else None
    names = (tuple(labels_file.read_text(encoding="utf-8").splitlines())
             if labels_file is not None and labels_file.is_file() else None)
    logits = np.asarray(outputs[SCORES])[0]  # [C] or [T, C]
    result: dict[str, Any] = {"model": model, "text": text, "logits": logits.tolist()}
    if TOKENS in outputs:  # tagging: per-token labels, "" past the text
        tokens = [t for t in _strings(outputs[TOKENS][0]) if t]
        result["tokens"] = tokens
        result["tags"] = _strings(outputs[LABEL][0])[: len(tokens)]
        result["logits"] = logits[: len(tokens)].tolist()
    else:
        result["label"] = _strings(outputs[LABEL][0])[0]
        label_names = label_names_for(names, logits.shape[-1])
        result["scores"] = dict(zip(label_names, softmax(logits).tolist(), strict=True))
    if ATTENDED in outputs:
        joined = _strings(outputs[ATTENDED][0])[0]
        result["open_tokens"] = joined.split(" ") if joined else []
    return result


def infer_request(
    *,
    url: str | None = None,
    model: str,
    text: str | None = None,
    ids: Sequence[int] | None = None,
    repo: Path | None = None,
    onnx_path: Path | None = None,
    timeout_s: float = 10.0,
    protocol: Protocol | str = Protocol.GRPC,
) -> dict[str, Any]:
    """Send one example; return label, scores and (GA-Net) the open tokens.

    `url` defaults to the protocol's loopback endpoint. A text model gets `text` as it is; an
    id model gets `text` tokenized here (needs `repo` or `onnx_path`) or `ids`.
    """
    if (text is None) == (ids is None):
        raise DataError("give exactly one of --text or --ids")
    protocol = as_protocol(protocol)
    if ids is not None and repo is not None and (Path(repo) / model).is_dir():
        cfg = read_config(Path(repo) / model)
        if cfg is not None and is_text_config(cfg):
            raise DataError(f"model {model!r} is a text model: send --text, or send --ids to "
                            f"its id model {cfg.parameters['ID_MODEL'].string_value!r}")
    if text is not None and _is_text_model(url, model, repo, timeout_s, protocol):
        outputs = infer_texts(url, model, [text], timeout_s=timeout_s, protocol=protocol)
        return _text_model_result(model, text, outputs, repo)
    onnx_path = onnx_path or (find_model_onnx(repo, model) if repo is not None else None)
    meta = _metadata(onnx_path) if onnx_path is not None else None
    tokenizer = meta.tokenizer if meta is not None else None
    if text is not None:
        if meta is None or tokenizer is None:
            raise ServerError(
                f"no vocabulary for model {model!r}: pass --repo with the packaged model (or "
                "--onnx) so --text can be tokenized, send --ids, or use its text model "
                f"{model}_text"
            )
        try:
            encoded = encode_text(tokenizer, text, max_seq=meta.max_seq,
                                  max_bytes=DEFAULT_MAX_TEXT_BYTES)
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
    # gRPC is infer_once's default; other protocols only are passed (keeps its call stable)
    extra = {} if protocol is Protocol.GRPC else {"protocol": protocol}
    outputs = infer_once(url, model, input_ids, np.ones_like(input_ids), timeout_s=timeout_s,
                         **extra)
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
