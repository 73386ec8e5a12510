"""token-classification's runtime part: one tag per token, the argmax of that token's logits,
and for a tagger whose labels are an entity scheme (B-/I-/M-/E-/S- tags) its `entities`.

The protocol every family's runtime part follows is described in
`attndeploy/families/text_classification/runtime.py` and docs/prediction-contract.md. This
part also has the optional `token_record(tokens, fields, names)`: the record's `entities`, each
{"type", "start", "end", "text"} (token positions, end exclusive; the text the span's tokens,
joined without a space when each is one character, as a character-level set's are, else with
one), read from the tags as conlleval reads them (`entity_spans`). A tagger with plain tags
(`unique`, `NN`) has no entities, so its record is what it was.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from attndeploy.runtime.contract import (
    BYTES,
    FP32,
    LOGITS,
    PROBABILITIES,
    TAGS,
    WireField,
    by_label,
    padded_numbers,
    padded_strings,
    softmax,
    strings,
)

FIELDS = (TAGS, LOGITS, PROBABILITIES)
LOGITS_RANK = 3  # [B, T, C]
TABLE_COLUMNS = ("tokens/tags",)
TABLE_FLEXIBLE = ("tokens/tags",)
TABLE_TEXT = False  # the tokens/tags column shows it


def wire_fields(num_labels: int) -> tuple[WireField, ...]:
    return (WireField(TAGS, BYTES, (-1,), "one label per token, '' past the text"),
            WireField(LOGITS, FP32, (-1, num_labels), "the id model's logits per token"),
            WireField(PROBABILITIES, FP32, (-1, num_labels), "their softmax over the labels"))


def decode(logits: np.ndarray, lengths: Sequence[int], names: Sequence[str],
           tag_ids: np.ndarray | None = None) -> list[dict[str, Any]]:
    """`logits` [B, T, C] -> per row one tag per real token (the argmax of its logits, or a CRF
    tagger's `tag_ids` [B, T]: the Viterbi path its graph computed), the row's logits
    [T_row, C] and their softmax (views of the batch's, padding cut off)."""
    probabilities = softmax(logits)  # [B, T, C]
    best = (logits.argmax(axis=-1) if tag_ids is None else tag_ids).tolist()  # [B, T] ints
    return [{TAGS: [names[i] for i in best[row][:length]],
             LOGITS: logits[row, :length], PROBABILITIES: probabilities[row, :length]}
            for row, length in enumerate(lengths)]


def record(fields: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
    return {TAGS: list(fields[TAGS]),
            LOGITS: by_label(np.asarray(fields[LOGITS]), names),
            PROBABILITIES: by_label(np.asarray(fields[PROBABILITIES]), names)}


def encode_wire(rows: Sequence[Mapping[str, Any]], width: int) -> dict[str, np.ndarray]:
    return {TAGS: padded_strings([row[TAGS] for row in rows], width),  # [B, T]
            LOGITS: padded_numbers([row[LOGITS] for row in rows], width),  # [B, T, C]
            PROBABILITIES: padded_numbers([row[PROBABILITIES] for row in rows], width)}


def decode_wire(outputs: Mapping[str, np.ndarray], row: int, length: int) -> dict[str, Any]:
    return {TAGS: strings(np.asarray(outputs[TAGS])[row])[:length],
            LOGITS: np.asarray(outputs[LOGITS])[row, :length],  # [T_row, C]
            PROBABILITIES: np.asarray(outputs[PROBABILITIES])[row, :length]}


def table_cells(prediction: Any) -> list[str]:
    pairs = zip(prediction.tokens, prediction.fields[TAGS], strict=True)
    cell = " ".join(f"{token}/{tag}" for token, tag in pairs)
    found = entities(prediction.tokens, prediction.fields[TAGS], prediction.label_names)
    if found:  # an entity tagger: its entities after the tags
        cell += "\n" + "; ".join(f"{e['type']}: {e['text']}" for e in found)
    return [cell]


ENTITIES = "entities"
SCHEME_PREFIXES = ("B-", "I-", "M-", "E-", "S-")


def is_entity_scheme(names: Sequence[str]) -> bool:
    """Whether the labels are an entity scheme: some label starts B-, I-, M-, E- or S-."""
    return any(name.startswith(SCHEME_PREFIXES) for name in names)


def entities(tokens: Sequence[str], tags: Sequence[str], names: Sequence[str]
             ) -> list[dict[str, Any]]:
    """The entities of one prediction (the module docstring); [] for plain tags."""
    if not is_entity_scheme(names):
        return []
    found = []
    for kind, start, end in entity_spans(tags):
        words = list(tokens[start:end])
        joiner = "" if all(len(word) == 1 for word in words) else " "
        found.append({"type": kind, "start": start, "end": end, "text": joiner.join(words)})
    return found


def token_record(tokens: Sequence[str], fields: Mapping[str, Any], names: Sequence[str]
                 ) -> dict[str, Any]:
    """{"entities": [...]} for an entity tagger, {} for plain tags (the record unchanged)."""
    if not is_entity_scheme(names):
        return {}
    return {ENTITIES: entities(tokens, fields[TAGS], names)}


# ----------------------------------------------------------------------------- entities

def _split(tag: str) -> tuple[str, str]:
    """(prefix, type) of a tag: `B-PER` -> ("B", "PER"), M read as I; `O` -> ("O", ""); a plain
    tag (no B/I/M/E/S prefix) -> ("S", tag): a one-token entity of its own type."""
    if tag == "O":
        return "O", ""
    prefix, dash, kind = tag.partition("-")
    if dash and kind and prefix in ("B", "I", "M", "E", "S"):
        return ("I" if prefix == "M" else prefix), kind
    return "S", tag


def entity_spans(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """The entities of one tag sequence as (type, start, end), token positions, end exclusive;
    chunks as conlleval and seqeval's default mode read them (BIO, BIOES/BMES alike), so a
    sequence a scheme forbids (a softmax tagger's I- after O) still reads as entities."""
    spans: list[tuple[str, int, int]] = []
    begin, previous, previous_type = -1, "O", ""
    for index, tag in enumerate([*tags, "O"]):  # a closing O ends the last entity
        prefix, kind = _split(tag)
        ends = (previous in ("E", "S")
                or (previous in ("B", "I") and prefix in ("B", "S", "O"))
                or (previous != "O" and previous_type != kind))
        if ends and begin >= 0:
            spans.append((previous_type, begin, index))
            begin = -1
        starts = (prefix in ("B", "S")
                  or (previous in ("E", "S", "O") and prefix in ("E", "I"))
                  or (prefix != "O" and previous_type != kind))
        if starts:
            begin = index
        previous, previous_type = prefix, kind
    return spans
