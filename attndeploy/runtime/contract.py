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

Which fields a prediction has besides `tokens` and `attended` is its model FAMILY's business
(`attndeploy.families`): each family's runtime part (`attndeploy/families/<package>/runtime.py`,
shipped beside the text model too) decodes a batch of model outputs into its fields and codes
them to and from the wire and JSON (docs/prediction-contract.md, "Family fields"). This module
holds what every family shares: `tokens`, gating's `attended`, padding, softmax, `by_label`, and
the envelope that puts a family's fields between them. The `tagging=` arguments of the functions
below are the names they had before families: they pick the built-in family of that head.

This file is shipped beside every text model (`runtime.shipping.SHIPPED_MODULES`): numpy only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
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
BYTES, FP32 = "BYTES", "FP32"  # wire datatypes (Triton's names): strings, numbers

PARAM_CONTRACT_VERSION = "CONTRACT_VERSION"  # text model config.pbtxt parameters
PARAM_LABEL_NAMES = "LABEL_NAMES"


class ContractError(ServerError):
    """A served answer that does not follow this contract (an old text model, or a foreign one)."""


@dataclass(frozen=True)
class WireField:
    """One output of a served text model: its name, wire datatype (`BYTES`, `FP32`), dims per
    row (batch implicit; -1: as long as the request's longest text) and what it holds."""

    name: str
    datatype: str
    dims: tuple[int, ...]
    doc: str


TOKENS_FIELD = WireField(TOKENS, BYTES, (-1,), "the text's tokens, '' past the text")
ATTENDED_FIELD = WireField(ATTENDED, BYTES, (1,),
                           "tokens whose hard gates are open, in order, space-joined")


def _family(family: ModuleType | None, tagging: bool | None) -> ModuleType:
    """The family runtime module given, or (the old `tagging=` argument) the built-in family of
    that head, found through the registry (never in a served model, which passes its family)."""
    if family is not None:
        return family
    if tagging is None:
        raise TypeError("give the model family's runtime module (family=)")
    from attndeploy.runtime.families import runtime_part

    return runtime_part("tagging" if tagging else "classification")


def wire_fields(family: ModuleType, *, num_labels: int, gated: bool) -> tuple[WireField, ...]:
    """Every output a text model of `family` answers, in order: `tokens`, the family's own
    fields (`family.wire_fields`), and `attended` when the model is gated."""
    fields = (TOKENS_FIELD, *family.wire_fields(num_labels))
    return (*fields, ATTENDED_FIELD) if gated else fields


def wire_outputs(*, gated: bool, tagging: bool | None = None,
                 family: ModuleType | None = None) -> tuple[str, ...]:
    """The output names a text model of this family answers, in order."""
    names = (TOKENS, *_family(family, tagging).FIELDS)
    return (*names, ATTENDED) if gated else names


def _every_family_field() -> tuple[str, ...]:
    from attndeploy.families.registry import family_specs
    from attndeploy.runtime.families import runtime_part

    names = [TOKENS]
    for spec in family_specs():
        names += [name for name in runtime_part(spec).FIELDS if name not in names]
    return (*names, ATTENDED)


def __getattr__(name: str) -> Any:
    """`FIELDS` (every field some registered family's record may hold) and `WIRE_DATATYPES`
    ({field: wire datatype}), computed from the families on first use."""
    if name == "FIELDS":
        return _every_family_field()
    if name == "WIRE_DATATYPES":
        from attndeploy.families.registry import family_specs
        from attndeploy.runtime.families import runtime_part

        types = {TOKENS: BYTES, ATTENDED: BYTES}
        for spec in family_specs():
            types.update((f.name, f.datatype) for f in runtime_part(spec).wire_fields(1))
        return types
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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


def family_record(family: ModuleType, *, tokens: Sequence[str], fields: Mapping[str, Any],
                  names: Sequence[str], attended: Sequence[str] | None = None) -> dict[str, Any]:
    """The JSON record of one prediction: `tokens`, the family's fields (`family.record`), the
    fields it derives from the tokens too where it has the optional `token_record(tokens,
    fields, names)` (token-classification's `entities`), and `attended` for a gated model."""
    out: dict[str, Any] = {TOKENS: list(tokens), **family.record(fields, names)}
    if hasattr(family, "token_record"):
        out.update(family.token_record(tokens, fields, names))
    if attended is not None:
        out[ATTENDED] = list(attended)
    return out


def record(*, tokens: Sequence[str], logits: np.ndarray, probabilities: np.ndarray,
           names: Sequence[str], label: str | None = None, tags: Sequence[str] | None = None,
           attended: Sequence[str] | None = None) -> dict[str, Any]:
    """The JSON record of a classification (`tags` None) or tagging prediction, as before
    families; `family_record` builds any family's."""
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


def padded_strings(rows: Sequence[Sequence[str]], width: int) -> np.ndarray:
    """[B, width] BYTES, "" past each row."""
    out = np.full((len(rows), width), b"", dtype=object)
    for index, row in enumerate(rows):
        out[index, : len(row)] = [value.encode("utf-8") for value in row]
    return out


def padded_numbers(rows: Sequence[np.ndarray], width: int) -> np.ndarray:
    """Rows [T_i, ...] as one array [B, width, ...] in their dtype, 0 past each row."""
    first = rows[0]
    out = np.zeros((len(rows), width, *first.shape[1:]), dtype=first.dtype)
    for index, row in enumerate(rows):
        out[index, : len(row)] = row
    return out


def column_strings(values: Sequence[str]) -> np.ndarray:
    """One string per row as BYTES [B, 1]."""
    return np.array([[value.encode("utf-8")] for value in values], dtype=object)


_padded_strings = padded_strings  # the name it had


def encode_wire(predictions: Sequence[Any], *, gated: bool, tagging: bool | None = None,
                family: ModuleType | None = None) -> dict[str, np.ndarray]:
    """The output tensors of one request's predictions (`runtime.text.Prediction`s, one per row,
    of one family: theirs unless `family` is given): `tokens` [B, T], the family's fields
    (`family.encode_wire`), `attended` [B, 1] when gated; per-token outputs right-padded to
    the request's longest text. `tagging` is ignored (the predictions know their family)."""
    runtime = family if family is not None else getattr(predictions[0], "runtime", None)
    runtime = _family(runtime, tagging)
    width = max(len(p.tokens) for p in predictions)
    out = {TOKENS: padded_strings([p.tokens for p in predictions], width)}  # [B, T]
    out.update(runtime.encode_wire([p.fields for p in predictions], width))
    if gated:
        out[ATTENDED] = column_strings([" ".join(p.attended) for p in predictions])  # [B, 1]
    return out


def strings(values: np.ndarray) -> list[str]:
    """A BYTES array's values (one axis) as str."""
    return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in values.tolist()]


_strings = strings  # the name it had


def _answer_family(outputs: Mapping[str, np.ndarray]) -> ModuleType:
    from attndeploy.runtime.families import runtime_for_outputs

    family = runtime_for_outputs(outputs)
    if family is None:
        raise ContractError(f"the answer has outputs {sorted(outputs)}, not those of "
                            f"prediction contract {CONTRACT_VERSION}")
    return family


def decode_wire(outputs: Mapping[str, np.ndarray], names: Sequence[str], *, row: int = 0,
                family: ModuleType | None = None) -> dict[str, Any]:
    """The record of row `row` of a text model's answer (of `family`; None: the registered
    family whose fields the answer holds); ContractError when the answer is not this
    contract's (an old text model answers `scores` and no `tokens`)."""
    runtime = family if family is not None else _answer_family(outputs)
    missing = [name for name in (TOKENS, *runtime.FIELDS) if name not in outputs]
    if missing:
        raise ContractError(f"the answer has outputs {sorted(outputs)}, not those of prediction "
                            f"contract {CONTRACT_VERSION}")
    tokens = [t for t in strings(np.asarray(outputs[TOKENS])[row]) if t]
    fields = runtime.decode_wire(outputs, row, len(tokens))
    attended = None
    if ATTENDED in outputs:
        joined = strings(np.asarray(outputs[ATTENDED])[row])[0]
        attended = joined.split(" ") if joined else []
    return family_record(runtime, tokens=tokens, fields=fields, names=names, attended=attended)


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
