"""`attndeploy.runtime.InferenceModel`: no torch, the same numbers as onnxruntime on the
checkpoint's own tokenization, the same labels as the served model through `infer --text`'s
path, GA-Net's attended tokens, the served model's input checks, and concurrent calls."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from attndeploy.checkpoint import read_checkpoint
from attndeploy.errors import ConfigError, DataError, ExportError
from attndeploy.runtime import InferenceModel, WordTokenizer
from attndeploy.runtime.metadata import parse_metadata
from attndeploy.serving.packaging.onnx_info import load_onnx_graph, read_model_info
from tests.serving.onnx_fixtures import build_model, save_model
from tests.serving.test_model_py import BAD_REQUESTS

from .conftest import LABELS, MAX_SEQ, TEXTS, TextExports, case_ids
from .records import assert_same_record

ATOL = 1e-6  # the bound: predict vs onnxruntime on the checkpoint's tokenization


def reference(exported, texts: list[str]) -> list[dict[str, np.ndarray]]:
    """Each text alone through onnxruntime, tokenized by the checkpoint's own tokenizer (the
    torch-side `attndeploy.data.WordTokenizer` saved with the weights)."""
    tokenizer = read_checkpoint(exported.checkpoint).tokenizer
    session = ort.InferenceSession(str(exported.path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    results = []
    for text in texts:
        ids, mask = tokenizer.encode_batch([text], max_seq=MAX_SEQ)  # torch [1, T]
        arrays = session.run(names, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
        results.append({name: array[0] for name, array in zip(names, arrays, strict=True)})
    return results


# --------------------------------------------------------------------------- torch-free


def test_the_runtime_and_the_predict_command_never_import_torch(text_exports: TextExports):
    path = text_exports.get("ganet_mlp").path
    script = f"""
import sys
import numpy as np
from attndeploy.runtime import InferenceModel
model = InferenceModel({str(path)!r}, threads=1)
model.predict(["w1 alpha w2", "bravo"])
model.run(np.array([[3, 4]]), np.array([[1, 1]]))
print("RUNTIME", sorted(m for m in ("torch", "onnx") if m in sys.modules))
from attndeploy.cli import app
sys.argv = ["attndeploy", "predict", {str(path)!r}, "--text", "w1 alpha", "--json"]
try:
    app.main()
except SystemExit as exc:
    assert exc.code == 0, exc.code
print("CLI", "torch" in sys.modules)
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0] == "RUNTIME []"  # onnxruntime and numpy only: neither torch nor onnx
    assert lines[-1] == "CLI False"  # the CLI loads onnx for other commands, never torch


# --------------------------------------------------------------------------- parity


@pytest.mark.parametrize("case_id", case_ids())
def test_predict_equals_onnxruntime_on_the_checkpoint_s_own_tokenization(
    text_exports: TextExports, case_id: str
):
    exported = text_exports.get(case_id)
    model = InferenceModel(exported.path, threads=1)
    expected = reference(exported, TEXTS)
    for batch_size in (1, 8, 64):
        predictions = model.predict(TEXTS, batch_size=batch_size)
        assert len(predictions) == len(TEXTS)
        for text, got, want in zip(TEXTS, predictions, expected, strict=True):
            np.testing.assert_allclose(got.logits, want["logits"], rtol=0, atol=ATOL,
                                       err_msg=f"{text!r}, batch_size {batch_size}")
            assert got.tokens == WordTokenizer.tokenize(text)
            best = want["logits"].argmax(-1)
            if exported.case.head == "tagging":
                assert got.label is None
                assert got.tags == [LABELS[i] for i in best]
                assert got.probabilities.shape == (len(got.tokens), len(LABELS))
            else:
                assert got.label == LABELS[int(best)]
                assert got.probabilities.shape == (len(LABELS),)
            np.testing.assert_allclose(got.probabilities.sum(-1), 1.0, rtol=0, atol=1e-6)
            if exported.case.is_gated:
                np.testing.assert_array_equal(got.gates, want["gates"])


@pytest.mark.parametrize("case_id", [p for p in case_ids() if "ganet" in p.id])
def test_attended_is_the_exported_gates_output_mapped_to_tokens(
    text_exports: TextExports, case_id: str
):
    exported = text_exports.get(case_id)
    predictions = InferenceModel(exported.path, threads=1).predict(TEXTS, batch_size=8)
    opened = closed = 0
    for text, got, want in zip(TEXTS, predictions, reference(exported, TEXTS), strict=True):
        tokens = WordTokenizer.tokenize(text)
        assert got.attended == [t for t, g in zip(tokens, want["gates"], strict=True) if g]
        opened += int(want["gates"].sum())
        closed += len(tokens) - int(want["gates"].sum())
    assert opened and closed, "the fixture should close some gates and leave others open"


def test_texts_are_batched_by_length_and_returned_in_input_order(text_exports: TextExports):
    model = InferenceModel(text_exports.get("standard").path, threads=1)
    widths: list[tuple[int, ...]] = []
    session = model.session

    class Recording:  # records the shape of every batch the model runs
        def run(self, names, feed):
            widths.append(feed["attention_mask"].shape)
            return session.run(names, feed)

    model.session = Recording()  # type: ignore[assignment]
    lengths = [len(WordTokenizer.tokenize(t)) for t in TEXTS]
    predictions = model.predict(TEXTS, batch_size=5)
    ordered = sorted(lengths)
    chunks = [ordered[i : i + 5] for i in range(0, len(ordered), 5)]
    assert widths == [(len(chunk), max(chunk)) for chunk in chunks]  # the least padding there is
    assert [len(p.tokens) for p in predictions] == lengths


def test_truncate_keeps_the_first_max_seq_tokens(text_exports: TextExports):
    model = InferenceModel(text_exports.get("ganet_mlp").path, threads=1)
    words = [f"w{i}" for i in range(MAX_SEQ + 5)]
    (cut,) = model.predict([" ".join(words)], truncate=True)
    (head,) = model.predict([" ".join(words[:MAX_SEQ])])
    assert cut.tokens == words[:MAX_SEQ]
    np.testing.assert_array_equal(cut.logits, head.logits)
    assert cut.attended == head.attended


# --------------------------------------------------------------------------- the served path


@pytest.mark.parametrize("case_id", ["standard", "ganet_mlp", "ganet_tagging", "evolving"])
def test_labels_equal_the_served_id_model_through_infer_text_s_path(
    text_exports: TextExports, case_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The served TEXT model does not exist yet: this compares predict with the served ID
    model (the generated python-backend model.py, run in process with a stand-in for Triton's
    python backend) reached through `infer_request(text=...)`, i.e. `attndeploy infer --text`
    minus the network."""
    from attndeploy.serving.client import infer as infer_module
    from attndeploy.serving.client.infer import infer_request
    from attndeploy.serving.packaging.repository import PackageOptions, package_model
    from tests.serving.test_model_py import FakeRequest, load_model

    exported = text_exports.get(case_id)
    package_model(exported.path, tmp_path / "repo", PackageOptions(name="m"))
    served = load_model(tmp_path / "repo", "m", monkeypatch)

    def infer_once(url, model, input_ids, attention_mask, *, timeout_s):
        (response,) = served.execute([FakeRequest(input_ids=input_ids,
                                                  attention_mask=attention_mask)])
        assert response.error is None, response.error
        return response.outputs

    monkeypatch.setattr(infer_module, "infer_once", infer_once)
    predictions = InferenceModel(exported.path, threads=1).predict(TEXTS, batch_size=8)
    for text, prediction in zip(TEXTS, predictions, strict=True):
        result = infer_request(url="in-process", model="m", text=text, repo=tmp_path / "repo")
        assert result["model"] == "m" and result["text"] == text
        assert_same_record(result, prediction.to_dict(), atol=ATOL)


# --------------------------------------------------------------------------- bad input


def test_bad_texts_are_data_errors_naming_their_index(text_exports: TextExports):
    model = InferenceModel(text_exports.get("standard").path, threads=1)
    too_long = " ".join(["w1"] * (MAX_SEQ + 1))
    cases = {
        "": r"text 1 has no tokens",
        "   \n\t": r"text 1 has no tokens",
        too_long: rf"text 1 has {MAX_SEQ + 1} tokens, more than the model's max_seq={MAX_SEQ};"
                  r" shorten it or pass truncate=True",
        b"w1": r"text 1 is a bytes, not a str",
    }
    for bad, message in cases.items():
        with pytest.raises(DataError, match=message):
            model.predict(["w1 w2", bad, "w3"])  # type: ignore[list-item]
    with pytest.raises(DataError, match="not one str"):
        model.predict("w1 w2")
    from attndeploy.runtime import DEFAULT_MAX_TEXT_BYTES

    huge = "w" * (DEFAULT_MAX_TEXT_BYTES + 1)  # one word: one token, under max_seq
    with pytest.raises(DataError, match=rf"text 1 has {DEFAULT_MAX_TEXT_BYTES + 1} bytes, more "
                                        rf"than the limit of {DEFAULT_MAX_TEXT_BYTES} bytes"):
        model.predict(["w1", huge], truncate=True)  # truncation does not lift the byte limit
    with pytest.raises(DataError, match="text 0 has 8 bytes, more than the limit of 7 bytes"):
        model.predict(["w1 é w2"], max_text_bytes=7)  # 8 UTF-8 bytes in 7 characters
    assert len(model.predict(["w1 é w2"], max_text_bytes=8)) == 1
    assert len(model.predict([huge], max_text_bytes=None)) == 1
    with pytest.raises(ConfigError, match="batch_size"):
        model.predict(["w1"], batch_size=0)
    assert model.predict([]) == []


@pytest.fixture(scope="module")
def id_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The serving tests' hand-built GA-Net-like model (vocabulary 16, max_seq 24, no
    tokenizer in its metadata): what `test_model_py.BAD_REQUESTS` was written for."""
    root = tmp_path_factory.mktemp("runtime_id_model")
    return save_model(build_model(gated=True, max_seq=24), root / "gated.onnx")


@pytest.mark.parametrize("case", sorted(set(BAD_REQUESTS) - {"missing mask"}))
def test_run_refuses_what_the_served_model_refuses_with_its_message(id_model: Path, case: str):
    inputs, message = BAD_REQUESTS[case]
    with pytest.raises(DataError, match=message):
        InferenceModel(id_model).run(inputs["input_ids"], inputs["attention_mask"])


def test_run_passes_ids_straight_through(id_model: Path):
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 16, size=(3, 7), dtype=np.int64)
    mask = np.array([[1] * 7, [1] * 3 + [0] * 4, [1] + [0] * 6], dtype=np.int64)
    session = ort.InferenceSession(str(id_model), providers=["CPUExecutionProvider"])
    want = session.run(["logits", "gates"], {"input_ids": ids, "attention_mask": mask})
    got = InferenceModel(id_model).run(ids, mask)
    assert list(got) == ["logits", "gates"]
    for name, array in zip(("logits", "gates"), want, strict=True):
        np.testing.assert_array_equal(got[name], array)
    with pytest.raises(DataError, match="must be a numpy array"):
        InferenceModel(id_model).run([[1, 2]], np.ones((1, 2), np.int64))  # type: ignore[arg-type]


def test_a_model_without_a_vocabulary_cannot_read_text(id_model: Path):
    with pytest.raises(DataError, match=r"holds no vocabulary .* run token ids with \.run\(\)"):
        InferenceModel(id_model).predict(["w1"])


def _foreign(path: Path) -> Path:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    return save_model(helper.make_model(graph), path)


def test_a_file_not_exported_by_attndeploy_is_a_clear_error(tmp_path: Path):
    foreign = _foreign(tmp_path / "foreign.onnx")
    with pytest.raises(ExportError, match=r"foreign\.onnx was not exported by attndeploy: its "
                                          r"metadata lacks attndeploy\.variant"):
        InferenceModel(foreign)
    no_labels = save_model(build_model(drop_metadata=("attndeploy.labels",)),
                           tmp_path / "no_labels.onnx")
    with pytest.raises(ExportError, match=r"lacks attndeploy\.labels"):
        InferenceModel(no_labels)
    (tmp_path / "text.onnx").write_text("not a model")
    with pytest.raises(ExportError, match=r"onnxruntime cannot load .*text\.onnx"):
        InferenceModel(tmp_path / "text.onnx")
    with pytest.raises(ExportError, match="is a folder"):
        InferenceModel(tmp_path)
    with pytest.raises(ExportError, match="no ONNX model at"):
        InferenceModel(tmp_path / "absent.onnx")


def test_threads_and_session_options_are_exclusive(id_model: Path):
    with pytest.raises(ConfigError, match="not both"):
        InferenceModel(id_model, threads=1, session_options=ort.SessionOptions())
    with pytest.raises(ConfigError, match="threads must be a positive integer"):
        InferenceModel(id_model, threads=0)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    assert InferenceModel(id_model, session_options=options).labels == (
        "label_0", "label_1", "label_2")


def test_metadata_reader_agrees_with_the_packager_s(text_exports: TextExports, id_model: Path):
    for path in (text_exports.get("ganet_tagging").path, id_model):
        graph = load_onnx_graph(path)
        ours = parse_metadata({p.key: p.value for p in graph.metadata_props}, str(path),
                              outputs=[output.name for output in graph.graph.output])
        theirs = read_model_info(graph, str(path))
        assert (ours.variant, ours.head, ours.labels, ours.max_seq, ours.vocab_size, ours.gated) \
            == (theirs.variant, theirs.head, theirs.labels, theirs.max_seq, theirs.vocab_size,
                theirs.gated)
    model = InferenceModel(text_exports.get("ganet_tagging").path)
    assert model.tokenizer == read_checkpoint(text_exports.get("ganet_tagging").checkpoint
                                              ).tokenizer
    assert (model.variant, model.head, model.max_seq, model.gated) == (
        "ganet", "tagging", MAX_SEQ, True)


# --------------------------------------------------------------------------- threads


def test_concurrent_predict_calls_equal_the_same_calls_made_one_after_another(
    text_exports: TextExports,
):
    model = InferenceModel(text_exports.get("ganet_mlp").path, threads=1)
    rng = random.Random(0)
    jobs = [(rng.sample(TEXTS, len(TEXTS)), rng.choice([1, 4, 16])) for _ in range(12)]
    alone = [model.predict(texts, batch_size=size) for texts, size in jobs]
    with ThreadPoolExecutor(max_workers=4) as pool:
        together = list(pool.map(lambda job: model.predict(job[0], batch_size=job[1]), jobs))
    for want, got in zip(alone, together, strict=True):
        for a, b in zip(want, got, strict=True):
            assert a.tokens == b.tokens and a.label == b.label and a.attended == b.attended
            np.testing.assert_array_equal(a.logits, b.logits)


# --------------------------------------------------------------------------- tokenizer


def test_the_training_tokenizer_is_the_runtime_tokenizer_with_torch_batches():
    import torch

    from attndeploy.data import WordTokenizer as TrainingTokenizer

    texts = ["The cat sat.", "the dog, the end!"]
    training, runtime = TrainingTokenizer.build(texts), WordTokenizer.build(texts)
    assert isinstance(training, WordTokenizer) and training == runtime
    ids, mask = training.encode_batch(texts, max_seq=8)
    np_ids, np_mask = runtime.encode_batch(texts, max_seq=8)
    assert ids.dtype == torch.long and isinstance(np_ids, np.ndarray)
    assert ids.tolist() == np_ids.tolist() and mask.tolist() == np_mask.tolist()
    assert json.dumps(training.to_dict()) == json.dumps(runtime.to_dict())
    assert re.fullmatch(r"WordTokenizer\(vocab_size=\d+\)", repr(training))
