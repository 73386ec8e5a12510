"""The prediction contract's codec: what `encode_wire` writes `decode_wire` reads back as the
in-process record, for every kind of answer; decisions on logits; old text models refused."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attndeploy.errors import ServerError
from attndeploy.runtime.contract import (
    CONTRACT_VERSION,
    FIELDS,
    ContractError,
    decode_wire,
    encode_wire,
    served_label_names,
    wire_outputs,
)
from attndeploy.runtime.text import decode_batch

from .records import assert_same_record

NAMES = ("neg", "neu", "pos")
TOKENS = [["a", "b", "c"], ["d"], ["e", "f"]]  # rows of different lengths


def predictions(*, tagging: bool, gated: bool, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    width = max(len(t) for t in TOKENS)
    shape = (len(TOKENS), width, len(NAMES)) if tagging else (len(TOKENS), len(NAMES))
    logits = rng.normal(0, 3, shape).astype(np.float32)  # [B, C] or [B, T, C]
    gates = rng.random((len(TOKENS), width)) < 0.5 if gated else None  # [B, T]
    return decode_batch(logits, gates, TOKENS, NAMES, tagging=tagging)


KINDS = [(tagging, gated) for tagging in (False, True) for gated in (False, True)]


@pytest.mark.parametrize(("tagging", "gated"), KINDS)
def test_the_wire_form_decodes_to_the_in_process_record(tagging: bool, gated: bool) -> None:
    batch = predictions(tagging=tagging, gated=gated)
    wire = encode_wire(batch, tagging=tagging, gated=gated)
    assert tuple(wire) == wire_outputs(tagging=tagging, gated=gated)
    assert wire["tokens"].shape == (3, 3) and wire["tokens"][1].tolist() == [b"d", b"", b""]
    for row, prediction in enumerate(batch):
        record = prediction.to_dict()
        assert set(record) <= set(FIELDS)
        assert ("tags" in record) == tagging and ("label" in record) != tagging
        assert ("attended" in record) == gated
        assert_same_record(decode_wire(wire, NAMES, row=row), record, atol=0.0)


@pytest.mark.parametrize("tagging", [False, True])
def test_the_label_is_the_argmax_of_the_logits_and_probabilities_their_softmax(tagging: bool
                                                                                ) -> None:
    for prediction in predictions(tagging=tagging, gated=False, seed=3):
        best = prediction.logits.argmax(-1)
        decided = prediction.tags if tagging else [prediction.label]
        assert decided == [NAMES[i] for i in np.atleast_1d(best)]
        np.testing.assert_allclose(prediction.probabilities.sum(-1), 1.0, atol=1e-6)
        with pytest.deprecated_call():
            assert prediction.scores is prediction.probabilities  # the old name still reads


def test_an_answer_of_another_shape_is_a_contract_error() -> None:
    old = {"label": np.array([[b"pos"]], dtype=object),
           "scores": np.zeros((1, 3), np.float32)}  # a text model packaged before version 2
    with pytest.raises(ContractError, match="not those of prediction contract 2"):
        decode_wire(old, NAMES)


def test_label_names_come_from_the_served_parameters_of_this_contract_only() -> None:
    params = {"CONTRACT_VERSION": str(CONTRACT_VERSION), "LABEL_NAMES": json.dumps(NAMES)}
    assert served_label_names(params, 3, "m_text") == NAMES
    with pytest.raises(ServerError, match="before the prediction contract had a version.*"
                                          "re-package it with `attndeploy package --force`"):
        served_label_names({"LABEL_NAMES": json.dumps(NAMES)}, 3, "m_text")
    with pytest.raises(ContractError, match="under prediction contract 3"):
        served_label_names({**params, "CONTRACT_VERSION": "3"}, 3, "m_text")
    with pytest.raises(ContractError, match="not a JSON list of 4 label names"):
        served_label_names(params, 4, "m_text")


def test_label_names_nested_deep_are_a_contract_error() -> None:
    params = {"CONTRACT_VERSION": str(CONTRACT_VERSION), "LABEL_NAMES": "[" * 100_000}
    with pytest.raises(ContractError, match="not a JSON list of 3 label names"):
        served_label_names(params, 3, "m_text")
