"""The checks part of a model family (`attndeploy.validate.families`): the built-in families'
parts, the protocol's defaults, and parity statistics that follow the part: per-token outputs
compared on real tokens only, the family's decision agreement under its name. A text-regression
part (`tests/families/sixth_family/text_regression/checks.py`, one float per text) is held to
the same protocol."""

from __future__ import annotations

import json
import types

import numpy as np
import pytest

from attndeploy.errors import ConfigError, DataError
from attndeploy.families.registry import family_specs
from attndeploy.validate.compare import Tolerance, compare_outputs
from attndeploy.validate.families import (
    checks_part,
    family_checks,
    read_checks,
    read_texts,
)
from attndeploy.validate.grid import default_grid
from tests.families.sixth_family import load_part

F32 = Tolerance(1e-5, 1e-4)


def _regression():
    return read_checks("text-regression", load_part("checks"))


def test_every_family_has_a_checks_part_that_reads():
    for spec in family_specs():
        checks = family_checks(spec)
        assert checks.family == spec.name
        assert checks_part(spec.head) is checks_part(spec)
        assert checks.decision_output == "logits"
        assert checks.validation_grid is default_grid  # neither needs a grid of its own


def test_the_built_in_families_say_what_is_per_token_and_what_is_decided():
    text, tags = family_checks("classification"), family_checks("tagging")
    assert (text.per_token_outputs, text.agreement_name) == ((), "label agreement")
    assert (tags.per_token_outputs, tags.agreement_name) == (("logits", "tag_ids"),
                                                             "tag agreement")  # a CRF's ids
    assert text.score_name == "accuracy" and text.score is not None
    assert tags.score is None  # its data files carry no per-token gold


def test_a_part_without_the_required_names_is_refused_naming_them():
    with pytest.raises(ConfigError, match="lacks PER_TOKEN_OUTPUTS, AGREEMENT, agreement"):
        read_checks("broken", types.ModuleType("broken_checks"))


def _tagging_outputs(rng: np.random.Generator) -> tuple[dict, dict, np.ndarray]:
    """Tagger logits [2, 4, 3] that differ only at padded positions."""
    valid = np.array([[True, True, True, True], [True, True, False, False]])  # [B, T]
    want = rng.normal(size=(2, 4, 3)).astype(np.float32)
    got = want.copy()
    got[1, 2:] += 50.0  # padding: meaningless
    return {"logits": got}, {"logits": want}, valid


def test_a_per_token_output_is_compared_on_real_tokens_only():
    got, want, valid = _tagging_outputs(np.random.default_rng(0))
    tagged = compare_outputs(got, want, F32, valid=valid, checks=family_checks("tagging"))
    assert tagged.passed
    logits = tagged.outputs["logits"]
    assert logits.compared == 6 * 3 and logits.agreement == "tag agreement"
    assert logits.argmax_agreement == 1.0
    # the same arrays as one row per text: every position counts
    whole = compare_outputs(got, want, F32, valid=valid, checks=family_checks("classification"))
    assert not whole.passed and whole.outputs["logits"].compared == 2 * 4 * 3


def test_the_old_tagging_flag_still_means_the_tagger_s_logits():
    got, want, valid = _tagging_outputs(np.random.default_rng(1))
    result = compare_outputs(got, want, F32, valid=valid, tagging=True)
    assert result.passed and result.outputs["logits"].agreement == "argmax agreement"


def test_text_classification_counts_labels_per_text():
    want = np.array([[1.0, 0.0], [0.0, 1.0], [2.0, 1.0]], np.float32)
    got = want.copy()
    got[2] = [1.0, 2.0]
    out = compare_outputs({"logits": got}, {"logits": want}, F32,
                          checks=family_checks("classification")).outputs["logits"]
    assert out.argmax_agreement == pytest.approx(2 / 3) and out.argmax_mismatches == 1
    assert out.to_json()["agreement"] == "label agreement"


# ----------------------------------------------------------------------------- text regression


def test_a_regression_part_compares_its_value_within_its_tolerance():
    checks = _regression()
    assert checks.per_token_outputs == () and checks.validation_grid is default_grid
    want = np.array([[1.0], [-2.0], [100.0]], np.float32)  # logits [B, 1]
    got = want + np.array([[0.005], [0.5], [0.9]], np.float32)
    out = compare_outputs({"logits": got}, {"logits": want}, F32, checks=checks,
                          valid=np.ones((3, 7), bool)).outputs["logits"]
    assert not out.passed  # parity: the tolerance rule on the value
    assert out.compared == 3  # one value per text, whatever the mask
    assert out.agreement == "value agreement"
    assert out.argmax_mismatches == 1  # -2.0 moved by 0.5 > 0.01 + 0.02; 100.0 by 0.9 <= 1.01
    assert checks.agreement(want, want).all()


def test_a_regression_part_reads_values_and_scores_pearson_r(tmp_path):
    checks = _regression()
    data = tmp_path / "values.jsonl"
    data.write_text("".join(json.dumps({"text": f"w{i}", "value": v}) + "\n"
                            for i, v in enumerate([0.5, 1.5, 3])))
    texts, gold = checks.read_examples(data, ("value",))
    assert texts == ["w0", "w1", "w2"] and gold == [0.5, 1.5, 3.0]
    rows = [np.array([v * 2 + 1], np.float32) for v in gold]  # outputs [1] per text
    assert checks.score_name == "pearson r"
    assert checks.score(rows, gold) == pytest.approx(1.0)
    assert checks.score(rows[:1], gold[:1]) == 0.0  # undefined: no fit to report
    data.write_text(json.dumps({"text": "w0", "value": "high"}) + "\n")
    with pytest.raises(DataError, match=r"values.jsonl:1: expected a finite number"):
        checks.read_examples(data, ("value",))


def test_the_default_reader_takes_each_line_s_text(tmp_path):
    data = tmp_path / "texts.jsonl"
    data.write_text('{"text": "a b"}\n\n{"text": "c", "tags": ["x"]}\n')
    assert read_texts(data) == ["a b", "c"]
    assert family_checks("tagging").read_examples(data, ("x", "y")) == (["a b", "c"], None)
    data.write_text('{"words": "a"}\n')
    with pytest.raises(DataError, match=r"texts.jsonl:1: expected an object with a string"):
        read_texts(data)


def test_a_family_that_takes_no_decision_reports_no_agreement():
    part = types.ModuleType("undecided_checks")
    part.PER_TOKEN_OUTPUTS, part.AGREEMENT = (), ""
    part.agreement = lambda actual, expected: None
    want = np.array([[0.5], [1.5]], np.float32)
    out = compare_outputs({"logits": want + 1.0}, {"logits": want}, F32,
                          checks=read_checks("undecided", part)).outputs["logits"]
    assert not out.passed and out.argmax_agreement is None and out.agreement is None


def test_validate_runs_the_family_s_own_grid_and_names_its_agreement(artifacts, monkeypatch):
    """A family whose checks part has `validation_grid` gets its shapes when none are given;
    a tagger's report counts tag agreement over its real tokens."""
    import dataclasses

    from attndeploy.validate import ValidationOptions, validate_model, validator
    from attndeploy.validate.grid import Shape
    from attndeploy.validate.oracles import ORT_ALL

    own = dataclasses.replace(family_checks("tagging"),
                              validation_grid=lambda max_seq: (Shape(1, 3), Shape(2, max_seq)))
    monkeypatch.setattr(validator, "family_checks", lambda head: own)
    case = artifacts.get("evolving_tagging")
    report = validate_model(case.checkpoint, case.onnx, ValidationOptions(
        reference_shapes=(), padding_check=False))
    assert report.passed
    assert [str(shape) for shape, _ in report.shapes] == ["1x3", "2x32"]
    result = report.oracles[ORT_ALL].results[-1].result.outputs["logits"]
    assert result.agreement == "tag agreement" and result.argmax_agreement == 1.0
    lengths = dict((str(s), n) for s, n in report.shapes)["2x32"]
    assert result.compared == sum(lengths) * 3  # real tokens x labels, padding left out
