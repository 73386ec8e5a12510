"""The prediction contract's `entities` for an entity tagger: a softmax tagger trained on a
character-level BMES file is exported, and `predict` splits raw text into characters as
training did and reports each entity's type, token span and text. A CRF tagger's export holds
its Viterbi path (`tag_ids`, ONNX Scan nodes), which validate finds identical to PyTorch's and
predict and the served text model decode by."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from typer.testing import CliRunner

from attndeploy.cli.app import app
from attndeploy.families.token_classification import runtime as tagging
from attndeploy.runtime.contract import decode_wire
from tests.serving.text_model_standin import load_text_model, text_request

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


@pytest.mark.slow  # trains, exports and validates: about 30 s
def test_a_crf_tagger_exports_its_viterbi_path_which_predict_validate_and_serving_use(
        bmes_file, tmp_path, monkeypatch):
    checkpoint, model = tmp_path / "crf", tmp_path / "crf.onnx"
    _cli("train", "--data", str(bmes_file), "--steps", "60", "--d-model", "32", "--head", "crf",
         "--char-cnn", "3", "--out", str(checkpoint), "--json")  # the CNN-Transformer-CRF
    _cli("export", str(checkpoint), "--out", str(model))
    graph = onnx.load(str(model))
    assert any(node.op_type == "Conv" for node in graph.graph.node)
    assert [value.name for value in graph.graph.output] == ["logits", "tag_ids"]
    assert sum(node.op_type == "Scan" for node in graph.graph.node) == 2
    report = json.loads(_cli("validate", str(checkpoint), str(model), "--json"))
    assert report["passed"]
    results = report["oracles"]["onnxruntime[all]"]["results"]
    assert all(r["outputs"]["tag_ids"]["max_abs"] == 0 for r in results)  # identical tags
    prediction = json.loads(_cli("predict", str(model), "--text", "张三在北京工作",
                                 "--json"))["predictions"][0]
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    ids = np.array([[1 + i for i in range(7)]])  # any ids: only the decoding path matters here
    logits, tag_ids = session.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids)})
    assert tag_ids.shape == (1, 7) and logits.shape == (1, 7, len(prediction["logits"][0]))
    assert "北京" in [e["text"] for e in prediction["entities"]]  # quality: test_train.py
    repo = tmp_path / "repo"
    _cli("package", str(model), "--repo", str(repo), "--flavor", "python", "--model", "crf")
    text_model = load_text_model(repo, "crf", monkeypatch)
    assert "tag_ids" in text_model.id_outputs  # the served model decodes by the Viterbi path
    (response,) = text_model.execute([text_request("张三在北京工作")])
    labels = tuple(prediction["logits"][0])
    served = decode_wire(response.outputs, labels, family=tagging)
    assert served["tags"] == prediction["tags"]
    assert served["entities"] == prediction["entities"]


def test_a_served_answer_s_record_carries_the_same_entities_as_in_process() -> None:
    from attndeploy.runtime.contract import decode_wire, encode_wire
    from attndeploy.runtime.text import decode_batch

    names = ("O", "B-LOC", "E-LOC", "S-PER")
    logits = np.full((1, 3, 4), -5.0, dtype=np.float32)  # [B, T, C]
    logits[0, [0, 1, 2], [3, 1, 2]] = 5.0  # S-PER B-LOC E-LOC
    (prediction,) = decode_batch(logits, None, [["张", "北", "京"]], names, family=tagging)
    wire = encode_wire([prediction], gated=False, family=tagging)  # what the text model answers
    served = decode_wire(wire, names, family=tagging)
    assert served["entities"] == prediction.to_dict()["entities"] == [
        {"type": "PER", "start": 0, "end": 1, "text": "张"},
        {"type": "LOC", "start": 1, "end": 3, "text": "北京"}]
