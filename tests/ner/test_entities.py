"""The prediction contract's `entities` for an entity tagger: a softmax tagger trained on a
character-level BMES file is exported, and `predict` splits raw text into characters as
training did and reports each entity's type, token span and text. A CRF tagger's export is
refused until its Viterbi is exported (issue #52)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from attndeploy.cli.app import app
from attndeploy.errors import ExportError
from attndeploy.families.token_classification import runtime as tagging

pytestmark = pytest.mark.usefixtures("torch_defaults")
runner = CliRunner()


def _cli(*args: str) -> str:
    result = runner.invoke(app, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_entities_hold_type_span_and_text_and_plain_tags_have_none() -> None:
    names = ("O", "B-PER", "E-PER", "S-LOC")
    record = tagging.token_record(["张", "三", "去", "京"], {"tags": ["B-PER", "E-PER", "O",
                                                                "S-LOC"]}, names)
    assert record == {"entities": [{"type": "PER", "start": 0, "end": 2, "text": "张三"},
                                   {"type": "LOC", "start": 3, "end": 4, "text": "京"}]}
    words = tagging.entities(["new", "york"], ["B-LOC", "I-LOC"], ("O", "B-LOC", "I-LOC"))
    assert words[0]["text"] == "new york"
    assert tagging.token_record(["t1"], {"tags": ["unique"]}, ("unique", "repeated")) == {}


def test_predict_splits_raw_text_by_characters_and_reports_entities(bmes_file, tmp_path):
    checkpoint, model = tmp_path / "ck", tmp_path / "m.onnx"
    _cli("train", "--data", str(bmes_file), "--steps", "60", "--d-model", "32", "--out",
         str(checkpoint), "--json")
    _cli("export", str(checkpoint), "--out", str(model))
    out = json.loads(_cli("predict", str(model), "--text", "张三在 北京工作", "--json"))
    prediction = out["predictions"][0]
    assert prediction["tokens"] == list("张三在北京工作")
    assert prediction["entities"] == [
        {"type": "PER", "start": 0, "end": 2, "text": "张三"},
        {"type": "LOC", "start": 3, "end": 5, "text": "北京"}]
    table = _cli("predict", str(model), "--text", "我去上海")
    assert "LOC: 上海" in table


def test_a_crf_tagger_s_export_is_refused_rather_than_decoded_by_argmax(bmes_file, tmp_path):
    checkpoint = tmp_path / "crf"
    _cli("train", "--data", str(bmes_file), "--steps", "4", "--d-model", "16", "--head", "crf",
         "--out", str(checkpoint), "--json")
    result = runner.invoke(app, ["export", str(checkpoint), "--out", str(tmp_path / "c.onnx")])
    assert result.exit_code == 1
    assert isinstance(result.exception, ExportError) and "Viterbi" in str(result.exception)
