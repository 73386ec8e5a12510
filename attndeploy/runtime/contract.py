"""The prediction contract: one schema for what every way of running a model answers, and the
one codec of its wire form.

In-process `Prediction.to_dict()` (`predict --json`), a served text model (`NAME_text`),
`attndeploy infer --json` and the load tester's oracle all answer with these fields:

| field           | classification          | tagging                         | when            |
|-----------------|-------------------------|---------------------------------|-----------------|
| `tokens`        | the tokens the model saw | the same                        | always          |
| `label`         | the label's name         | –                               | classification  |
| `tags`          | –                        | one label name per token        | tagging         |
| `logits`        | {label: logit}           | one {label: logit} per token    | always          |
| `probabilities` | {label: softmax}         | one {label: softmax} per token  | always          |
| `attended`      | open tokens, in order    | the same                        | GA-Net (gated)  |

`label` and `tags` are the argmax of the logits (a decision is taken on logits, never on
probabilities); `probabilities` are their softmax over the labels, in float32.

Wire form (a served text model's outputs, batch first; `encode_wire` writes it, `decode_wire`
reads it back into the record above): `tokens` BYTES [B, T] ("" past a shorter text of the
request), `label` BYTES [B, 1] or `tags` BYTES [B, T], `logits` and `probabilities` FP32 [B, C]
or [B, T, C] (0 past a text), `attended` BYTES [B, 1] (the open tokens joined by single spaces:
tokens never hold whitespace). A text model's config.pbtxt carries `CONTRACT_VERSION` and
`LABEL_NAMES` (a JSON list) among its parameters, so a client decodes the answer with the label
names without the repository. Version 1 (before this module) answered the logits as `scores`
and had no version parameter; a client refuses it with a message to re-package.

This file is shipped beside every text model (`runtime.shipping.SHIPPED_MODULES`): numpy only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from attndeploy.errors import ServerError

CONTRACT_VERSION = 2

TOKENS = "tokens"
LABEL = "label"
TAGS = "tags"
LOGITS = "logits"
PROBABILITIES = "probabilities"
ATTENDED = "attended"
FIELDS = (TOKENS, LABEL, TAGS, LOGITS, PROBABILITIES, ATTENDED)
# The wire datatype (Triton's name) of each output: strings as BYTES, numbers as FP32.
WIRE_DATATYPES = {TOKENS: "BYTES", LABEL: "BYTES", TAGS: "BYTES", LOGITS: "FP32",
                  PROBABILITIES: "FP32", ATTENDED: "BYTES"}

PARAM_CONTRACT_VERSION = "CONTRACT_VERSION"  # text model config.pbtxt parameters
PARAM_LABEL_NAMES = "LABEL_NAMES"


class ContractError(ServerError):
    """A served answer that does not follow this contract (an old text model, or a foreign one)."""


def wire_outputs(*, tagging: bool, gated: bool) -> tuple[str, ...]:
    """The output names a text model of this kind answers, in order."""
    names = [TOKENS, TAGS if tagging else LABEL, LOGITS, PROBABILITIES]
    return (*names, ATTENDED) if gated else tuple(names)


def softmax(logits: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, in the logits' dtype (max subtracted first)."""
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def by_label(values: np.ndarray, names: Sequence[str]) -> dict[str, float] | list[dict[str, float]]:
    """[C] -> {name: value}; [T, C] -> one such mapping per token (JSON-ready floats)."""
    rows = values.tolist()
    if values.ndim == 1:
        return dict(zip(names, rows, strict=True))
    return [dict(zip(names, row, strict=True)) for row in rows]


def record(*, tokens: Sequence[str], logits: np.ndarray, probabilities: np.ndarray,
           names: Sequence[str], label: str | None = None, tags: Sequence[str] | None = None,
           attended: Sequence[str] | None = None) -> dict[str, Any]:
    """The JSON record of one prediction, with exactly the fields its kind has (see the table)."""
    out: dict[str, Any] = {TOKENS: list(tokens)}
    if tags is None:
        out[LABEL] = label
    else:
        out[TAGS] = list(tags)
    out[LOGITS] = by_label(np.asarray(logits), names)
    out[PROBABILITIES] = by_label(np.asarray(probabilities), names)
    if attended is not None:
        out[ATTENDED] = list(attended)
    return out


def _padded_strings(rows: Sequence[Sequence[str]], width: int) -> np.ndarray:
    """[B, width] BYTES, "" past each row."""
    out = np.full((len(rows), width), b"", dtype=object)
    for index, row in enumerate(rows):
        out[index, : len(row)] = [value.encode("utf-8") for value in row]
    return out


def encode_wire(predictions: Sequence[Any], *, tagging: bool, gated: bool
                ) -> dict[str, np.ndarray]:
    """The output tensors of one request's predictions (`runtime.text.Prediction`s, one per row):
    per-token outputs right-padded to the request's longest text."""
    rows = len(predictions)
    width = max(len(p.tokens) for p in predictions)
    classes = predictions[0].logits.shape[-1]
    dtype = predictions[0].logits.dtype
    out = {TOKENS: _padded_strings([p.tokens for p in predictions], width)}  # [B, T]
    if tagging:
        out[TAGS] = _padded_strings([p.tags for p in predictions], width)  # [B, T]
        logits = np.zeros((rows, width, classes), dtype=dtype)  # [B, T, C], 0 past a text
        probabilities = np.zeros((rows, width, classes), dtype=dtype)
        for index, p in enumerate(predictions):
            logits[index, : len(p.tokens)] = p.logits
            probabilities[index, : len(p.tokens)] = p.probabilities
    else:
        out[LABEL] = np.array([[p.label.encode("utf-8")] for p in predictions],
                              dtype=object)  # [B, 1]
        logits = np.stack([p.logits for p in predictions])  # [B, C]
        probabilities = np.stack([p.probabilities for p in predictions])  # [B, C]
    out[LOGITS], out[PROBABILITIES] = logits, probabilities
    if gated:
        out[ATTENDED] = np.array([[" ".join(p.attended).encode("utf-8")] for p in predictions],
                                 dtype=object)  # [B, 1]
    return out


def _strings(values: np.ndarray) -> list[str]:
    return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in values.tolist()]


def decode_wire(outputs: Mapping[str, np.ndarray], names: Sequence[str], *, row: int = 0
                ) -> dict[str, Any]:
    """The record of row `row` of a text model's answer; ContractError when the answer is not
    this contract's (an old text model answers `scores` and no `tokens`)."""
    missing = [name for name in (TOKENS, LOGITS, PROBABILITIES) if name not in outputs]
    if missing or (LABEL in outputs) == (TAGS in outputs):
        raise ContractError(f"the answer has outputs {sorted(outputs)}, not those of prediction "
                            f"contract {CONTRACT_VERSION}")
    tokens = [t for t in _strings(np.asarray(outputs[TOKENS])[row]) if t]
    logits = np.asarray(outputs[LOGITS])[row]  # [C] or [T, C]
    probabilities = np.asarray(outputs[PROBABILITIES])[row]
    tags = label = None
    if TAGS in outputs:
        tags = _strings(np.asarray(outputs[TAGS])[row])[: len(tokens)]
        logits, probabilities = logits[: len(tokens)], probabilities[: len(tokens)]
    else:
        label = _strings(np.asarray(outputs[LABEL])[row])[0]
    attended = None
    if ATTENDED in outputs:
        joined = _strings(np.asarray(outputs[ATTENDED])[row])[0]
        attended = joined.split(" ") if joined else []
    return record(tokens=tokens, logits=logits, probabilities=probabilities, names=names,
                  label=label, tags=tags, attended=attended)


def served_label_names(parameters: Mapping[str, str], num_labels: int, model: str
                       ) -> tuple[str, ...]:
    """The label names a text model's config parameters carry; ContractError when it was
    packaged under another contract version (naming what to do)."""
    version = parameters.get(PARAM_CONTRACT_VERSION)
    if version != str(CONTRACT_VERSION):
        was = "before the prediction contract had a version" if version is None else \
            f"under prediction contract {version}"
        raise ContractError(f"text model {model!r} was packaged {was}; this attndeploy reads "
                            f"contract {CONTRACT_VERSION}: re-package it with `attndeploy "
                            "package --force`")
    from attndeploy.jsonread import parse_json

    try:
        names = parse_json(parameters.get(PARAM_LABEL_NAMES, ""), PARAM_LABEL_NAMES,
                           error=ContractError)
    except ContractError:  # not JSON, or nested too deep: refused below
        names = None
    if not (isinstance(names, list) and len(names) == num_labels
            and all(isinstance(name, str) for name in names)):
        raise ContractError(f"text model {model!r}: parameter {PARAM_LABEL_NAMES} is not a "
                            f"JSON list of {num_labels} label names; re-package it")
    return tuple(names)
