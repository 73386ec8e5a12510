"""One request from text or ids, over gRPC or HTTP, decoded with the model's own labels.

Two kinds of served model take a text:

- a text model (`<name>_text`, see `text_model.py`) tokenizes and decodes in the server: the text
  is sent as it is, and its answer (label, logits, GA-Net's attended tokens, a tagger's tags)
  comes back decoded;
- an id model takes token ids: the text is tokenized here with the vocabulary in the exported
  ONNX file's metadata, so `infer` needs the repository (or an explicit ONNX file) next to the
  server's URL, and the outputs are decoded here.

Either way the tokenizer and decoder are `attndeploy.runtime.text`'s, the code of in-process
`predict` (the text model runs a byte-identical copy of it), and the answer is the prediction
contract's record (`attndeploy.runtime.contract`): the fields `predict --json` prints, after
`model` and `text`. A text model's answer is decoded by the contract's codec with the label names
its served configuration carries, so no repository is needed, and by the runtime part of the
model's family (`attndeploy.families`): the one its `HEAD` parameter (a text model) or its
metadata (an id model) names. Which kind a model is comes from
its folder in the repository, or, when the repository does not hold it, from the server's
metadata.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from attndeploy.errors import DataError, ServerError
from attndeploy.families.registry import heads
from attndeploy.runtime import DEFAULT_MAX_TEXT_BYTES
from attndeploy.runtime.contract import CONTRACT_VERSION, decode_wire, served_label_names
from attndeploy.runtime.families import runtime_for_logits, runtime_part
from attndeploy.runtime.metadata import ModelMetadata, parse_metadata
from attndeploy.runtime.text import TextError, decode_batch, encode_text
from attndeploy.serving.client.triton import (
    Protocol,
    TritonRunner,
    as_protocol,
    infer_once,
    text_feed,
)
from attndeploy.serving.packaging.image_model import is_image_config
from attndeploy.serving.packaging.model_config import PARAM_HEAD, PARAM_NUM_LABELS
from attndeploy.serving.packaging.text_model import (
    TEXT,
    is_text_config,
    read_config,
    text_model_name,
)
from attndeploy.serving.server.launch import find_model_onnx


def _metadata(onnx_path: Path) -> ModelMetadata:
    """The model's metadata, read with `onnx` (without the weights; no session, no torch)."""
    from attndeploy.serving.packaging.onnx_info import load_onnx_graph

    model = load_onnx_graph(onnx_path)
    return parse_metadata({p.key: p.value for p in model.metadata_props}, str(onnx_path),
                          outputs=[output.name for output in model.graph.output])


def _is_text_model(url: str | None, model: str, repo: Path | None, timeout_s: float,
                   protocol: Protocol) -> bool:
    """Whether `model` takes `text`: its repository folder says so, else the server does."""
    if repo is not None and (Path(repo) / model).is_dir():
        cfg = read_config(Path(repo) / model)
        return cfg is not None and is_text_config(cfg)
    with TritonRunner(url, model, timeout_s=timeout_s, protocol=protocol) as runner:
        return runner.metadata().input(TEXT) is not None


def _text_model_result(url: str | None, model: str, text: str, timeout_s: float,
                       protocol: Protocol) -> dict[str, Any]:
    """One text sent to a text model, its answer decoded by the contract's codec with the label
    names of the model's served configuration (one row)."""
    with TritonRunner(url, model, timeout_s=timeout_s, protocol=protocol) as runner:
        config = runner.model_config()
        outputs = runner.infer(text_feed([text]))
    parameters = {key: value.get("string_value", "")
                  for key, value in config.get("parameters", {}).items()}
    raw = parameters.get(PARAM_NUM_LABELS, "")
    num_labels = int(raw) if raw.isdigit() else np.asarray(
        outputs.get("logits", np.zeros((1, 0)))).shape[-1]
    names = served_label_names(parameters, num_labels, model)
    head = parameters.get(PARAM_HEAD)  # its family's; unknown here: found from the answer
    family = runtime_part(head) if head in heads() else None
    return {"model": model, "text": text, "contract_version": CONTRACT_VERSION,
            **decode_wire(outputs, names, family=family)}


def _served(url: str | None, model: str, repo: Path | None, timeout_s: float,
            protocol: Protocol) -> bool:
    """Whether `model` is a folder of `repo` or, without one, ready on the server."""
    if repo is not None:
        return (Path(repo) / model).is_dir()
    with TritonRunner(url, model, timeout_s=timeout_s, protocol=protocol) as runner:
        return runner.is_ready()


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
    """Send one example; return `model` (and `text`) and the prediction contract's record:
    tokens, label (tagging: tags), logits, probabilities and GA-Net's attended tokens.

    `url` defaults to the protocol's loopback endpoint. A text model gets `text` as it is; an
    id model gets `text` tokenized here (needs `repo` or `onnx_path`) or `ids`.
    """
    if (text is None) == (ids is None):
        raise DataError("give exactly one of --text or --ids")
    protocol = as_protocol(protocol)
    if repo is not None and (Path(repo) / model).is_dir():
        cfg = read_config(Path(repo) / model)
        if cfg is not None and is_image_config(cfg):
            raise DataError(f"model {model!r} is an image model: send image files with "
                            "--image-file")
    if ids is not None and repo is not None and (Path(repo) / model).is_dir():
        cfg = read_config(Path(repo) / model)
        if cfg is not None and is_text_config(cfg):
            raise DataError(f"model {model!r} is a text model: send --text, or send --ids to "
                            f"its id model {cfg.parameters['ID_MODEL'].string_value!r}")
    if text is not None and _is_text_model(url, model, repo, timeout_s, protocol):
        return _text_model_result(url, model, text, timeout_s, protocol)
    onnx_path = onnx_path or (find_model_onnx(repo, model) if repo is not None else None)
    meta = _metadata(onnx_path) if onnx_path is not None else None
    tokenizer = meta.tokenizer if meta is not None else None
    if text is not None:
        if meta is None or tokenizer is None:
            text_model = text_model_name(model)
            use_text_model = (f", or use its text model {text_model}"
                              if _served(url, text_model, repo, timeout_s, protocol) else "")
            raise ServerError(
                f"no vocabulary for model {model!r}: pass --repo with the packaged model (or "
                f"--onnx) so --text can be tokenized, or send --ids{use_text_model}"
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
    logits = outputs["logits"]  # [1, C] or [1, T, C]: as the model's family says
    family = meta.runtime if meta is not None else runtime_for_logits(logits)
    (prediction,) = decode_batch(
        logits, outputs.get("gates"), [tokens], meta.labels if meta is not None else None,
        family=family,
    )
    head = {"model": model} if text is None else {"model": model, "text": text}
    return {**head, "contract_version": CONTRACT_VERSION, **prediction.to_dict()}
