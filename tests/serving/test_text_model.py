"""The text model `<name>_text` without a server: what `package` writes, and the generated
model.py run in-process (`text_model_standin`) on requests good and bad. Every test on the
packaged repository runs for both ways the text model runs its id model (`CALLS`): the id
model's ONNX in its own onnxruntime session, and a BLS call that the stand-in answers with the id
model's own generated model.py; either way the id-model calls are recorded in `FakeServer.calls`
(the real server runs both in `test_text_served.py`; check-repo's findings are in
`test_text_model_checks.py`, loading in `test_text_model_load.py`).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

import attndeploy
from attndeploy.errors import RepositoryError
from attndeploy.runtime.contract import CONTRACT_VERSION, decode_wire
from attndeploy.runtime.shipping import SHIPPED_MODULES, runtime_sources
from attndeploy.serving.packaging.check_repo import check_repository
from attndeploy.serving.packaging.model_template import generate_text_model_py
from attndeploy.serving.packaging.onnx_info import load_onnx_graph, read_model_info
from attndeploy.serving.packaging.repository import PackageOptions, package_model
from attndeploy.serving.packaging.text_model import text_interface
from tests.runtime.records import assert_same_record
from tests.serving.text_model_standin import (
    CALLS,
    FIXTURES,
    MAX_SEQ,
    TEXTS,
    VOCAB,
    break_id_model,
    call_of,
    expected,
    load_text_model,
    mend_id_model,
    packaged_repo,
    strings,
    text_request,
)

from .onnx_fixtures import build_model, save_model
from .test_model_py import FakeRequest, FakeTritonError


@pytest.fixture(scope="module", params=CALLS)
def repo(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return packaged_repo(tmp_path_factory.mktemp(f"text_model_{request.param}"), request.param)


# --------------------------------------------------------------------------- package


def test_package_writes_a_text_model_beside_every_id_model_with_a_tokenizer(repo: Path) -> None:
    assert sorted(p.name for p in repo.iterdir()) == sorted(
        [*FIXTURES, *(f"{n}_text" for n in FIXTURES)])
    files = sorted(str(p.relative_to(repo / "gated_text"))
                   for p in (repo / "gated_text").rglob("*") if p.is_file())
    family = "attndeploy/families/text_classification/runtime.py"
    assert files == sorted(["config.pbtxt", "labels.txt", "tokenizer.json",
                            "family_runtime.json", "1/model.py", f"1/{family}",
                            *(f"1/{relative}" for _, relative in SHIPPED_MODULES)])
    assert json.loads((repo / "gated_text" / "family_runtime.json").read_text()) == {
        "module": "attndeploy.families.text_classification.runtime", "path": family}
    assert json.loads((repo / "gated_text" / "tokenizer.json").read_text()) == {
        "type": "word", "vocab": VOCAB}
    assert (repo / "gated_text" / "1" / "model.py").read_text() == generate_text_model_py()


def test_the_shipped_runtime_is_the_package_s_own_files_byte_for_byte(repo: Path) -> None:
    package_root = Path(attndeploy.__file__).parent.parent
    assert set(runtime_sources()) == {relative for _, relative in SHIPPED_MODULES}
    for relative, content in runtime_sources().items():
        assert content == (package_root / relative).read_bytes(), relative
        assert (repo / "cls_text" / "1" / relative).read_bytes() == content, relative
    family = "attndeploy/families/text_classification/runtime.py"
    assert (repo / "cls_text" / "1" / family).read_bytes() == (
        package_root / family).read_bytes()


def test_a_family_s_runtime_part_ships_from_its_own_file_placed_by_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Wherever the family's module lives (here a package outside attndeploy), its copy's path
    is its dotted name below the folder that holds its top-level package."""
    import importlib

    from attndeploy.runtime.shipping import family_runtime_shipment

    folder = tmp_path / "site" / "somewhere_fam" / "regress"
    folder.mkdir(parents=True)
    for path in (folder.parent / "__init__.py", folder / "__init__.py"):
        path.write_text("")
    (folder / "runtime.py").write_text("FIELDS = ('value',)\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    shipped = family_runtime_shipment(importlib.import_module("somewhere_fam.regress.runtime"))
    assert (shipped.name, shipped.relative) == ("somewhere_fam.regress.runtime",
                                                "somewhere_fam/regress/runtime.py")
    assert shipped.content == b"FIELDS = ('value',)\n"
    package = family_runtime_shipment(importlib.import_module("somewhere_fam.regress"))
    assert package.relative == "somewhere_fam/regress/__init__.py"


@pytest.mark.parametrize(("base", "outputs"), [
    ("cls", {"tokens": [-1], "label": [1], "logits": [3], "probabilities": [3]}),
    ("gated", {"tokens": [-1], "label": [1], "logits": [3], "probabilities": [3],
               "attended": [1]}),
    ("tag", {"tokens": [-1], "tags": [-1], "logits": [-1, 3], "probabilities": [-1, 3],
             "attended": [1]}),
])
def test_the_config_declares_text_in_and_the_decoded_outputs(repo: Path, base: str,
                                                              outputs: dict) -> None:
    cfg = mc.ModelConfig()
    text_format.Parse((repo / f"{base}_text" / "config.pbtxt").read_text(), cfg)
    assert cfg.backend == "python" and cfg.max_batch_size == 8
    assert [(i.name, mc.DataType.Name(i.data_type), list(i.dims)) for i in cfg.input] == [
        ("text", "TYPE_STRING", [1])]
    assert {o.name: list(o.dims) for o in cfg.output} == outputs
    assert cfg.HasField("dynamic_batching") and not cfg.model_warmup
    assert [(g.count, g.kind) for g in cfg.instance_group] == [(1, mc.ModelInstanceGroup.KIND_CPU)]
    params = {k: v.string_value for k, v in cfg.parameters.items()}
    if call_of(repo) == "onnxruntime":  # the only batcher on the text path: the id model's delay
        assert cfg.dynamic_batching.max_queue_delay_microseconds == 500
        assert params["ID_MODEL_CALL"] == "onnxruntime" and params["ORT_THREADS"] == "1"
    else:  # BLS: the id model's batcher waits, not this one
        assert cfg.dynamic_batching.max_queue_delay_microseconds == 0
        assert params["ID_MODEL_CALL"] == "bls" and "ORT_THREADS" not in params
    assert params["ID_MODEL"] == base and params["MAX_SEQ"] == str(MAX_SEQ)
    assert params["TRUNCATE"] == "false"
    assert params["CONTRACT_VERSION"] == str(CONTRACT_VERSION)
    assert json.loads(params["LABEL_NAMES"]) == list(read_model_info(
        load_onnx_graph(repo / base / "1" / "model.onnx")).labels)


def test_no_text_model_without_a_tokenizer_or_with_text_off(tmp_path: Path) -> None:
    bare = save_model(build_model(), tmp_path / "bare.onnx")
    worded = save_model(build_model(vocab=VOCAB), tmp_path / "worded.onnx")
    assert [m.name for m in package_model(bare, tmp_path / "r1")] == ["bare"]
    written = package_model(worded, tmp_path / "r2", PackageOptions(text=False))
    assert [m.name for m in written] == ["worded"]


def test_with_both_flavours_the_text_model_calls_the_python_one(tmp_path: Path) -> None:
    source = save_model(build_model(vocab=VOCAB), tmp_path / "m.onnx")
    written = package_model(source, tmp_path / "repo", PackageOptions(name="m", flavor="both"))
    assert [(m.name, m.id_model) for m in written] == [
        ("m_python", None), ("m_onnxruntime", None), ("m_text", "m_python")]
    assert written[-1].to_dict()["kind"] == "text"
    only_ort = package_model(source, tmp_path / "repo2",
                             PackageOptions(name="m", flavor="onnxruntime"))
    assert only_ort[-1].id_model == "m"
    # it runs the python flavour's ONNX itself; the onnxruntime backend's it calls by BLS
    assert call_of(tmp_path / "repo", "m") == "onnxruntime"
    assert call_of(tmp_path / "repo2", "m") == "bls"


def test_an_existing_text_model_needs_force_and_nothing_is_written(repo: Path,
                                                                    tmp_path: Path) -> None:
    source = save_model(build_model(vocab=VOCAB), tmp_path / "m.onnx")
    (tmp_path / "repo" / "m_text").mkdir(parents=True)
    with pytest.raises(RepositoryError, match="m_text"):
        package_model(source, tmp_path / "repo", PackageOptions(name="m"))
    assert sorted(p.name for p in (tmp_path / "repo").iterdir()) == ["m_text"]


def test_a_tokenizer_type_no_text_model_serves_is_refused_naming_no_text(tmp_path: Path) -> None:
    model = build_model()
    model.metadata_props.add(key="attndeploy.tokenizer", value=json.dumps({"type": "bpe"}))
    source = save_model(model, tmp_path / "m.onnx")
    with pytest.raises(RepositoryError, match=r"'bpe'.*--no-text-model"):
        package_model(source, tmp_path / "repo")
    assert [m.name for m in package_model(source, tmp_path / "repo",
                                          PackageOptions(text=False))] == ["m"]

# --------------------------------------------------------------------------- the model in process


@pytest.mark.parametrize("base", sorted(FIXTURES))
def test_texts_of_different_lengths_in_one_request_equal_onnxruntime(
    repo: Path, base: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = load_text_model(repo, base, monkeypatch)
    (response,) = model.execute([text_request(*TEXTS)])
    assert response.error is None, response.error
    want = expected(repo, base, TEXTS)
    assert model.server.calls == [(base, 1, want["mask"].shape)]  # one call for the batch
    out = response.outputs
    if base == "tag":
        mask = want["mask"].astype(bool)
        np.testing.assert_allclose(out["logits"], np.where(mask[..., None], want["logits"], 0),
                                   rtol=0, atol=1e-6)
        for row, p in enumerate(want["predictions"]):
            assert strings(out["tags"])[row] == p.tags + [""] * (mask.shape[1] - len(p.tags))
    else:
        np.testing.assert_allclose(out["logits"], want["logits"], rtol=0, atol=1e-6)
        assert strings(out["label"]) == [[p.label] for p in want["predictions"]]
    for row, p in enumerate(want["predictions"]):
        assert strings(out["tokens"])[row] == p.tokens + [""] * (want["mask"].shape[1]
                                                                 - len(p.tokens))
        np.testing.assert_allclose(out["probabilities"][row][: len(p.tokens)] if base == "tag"
                                   else out["probabilities"][row], p.probabilities,
                                   rtol=0, atol=1e-6)
        assert_same_record(decode_wire(out, p.label_names, row=row), p.to_dict(), atol=1e-6)
    if "attended" in out:
        assert strings(out["attended"]) == [[" ".join(p.attended)] for p in want["predictions"]]


def test_each_request_of_a_batch_gets_its_own_rows_and_shares_one_id_model_call(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = load_text_model(repo, "tag", monkeypatch)
    requests = [text_request(TEXTS[0]), text_request(TEXTS[1], TEXTS[3]), text_request("w9")]
    responses = model.execute(requests)
    assert len(model.server.calls) == 1 and model.server.calls[0][2][0] == 4
    for texts, response in zip(([TEXTS[0]], [TEXTS[1], TEXTS[3]], ["w9"]), responses,
                               strict=True):
        want = expected(repo, "tag", texts)
        width = want["mask"].shape[1]  # each request is padded to its own longest text
        assert response.outputs["tags"].shape == (len(texts), width)
        assert response.outputs["logits"].shape == (len(texts), width, 3)
        for row, p in enumerate(want["predictions"]):
            assert strings(response.outputs["tags"])[row][: len(p.tags)] == p.tags


BAD_TEXTS = {
    "empty": ("", r"text 0 has no tokens"),
    "whitespace only": (" \t\n ", r"text 0 has no tokens"),
    "invalid utf-8": (b"w3 \xff\xfe w4", r"text 0 is not valid UTF-8 .* at byte 3"),
    "too long": (" ".join(["w3"] * (MAX_SEQ + 1)),
                 rf"text 0 has {MAX_SEQ + 1} tokens, more than the model's max_seq={MAX_SEQ}; "
                 r"shorten it, or re-package with --truncate"),
}


DEFAULT_TEXT_LIMIT = PackageOptions().max_text_bytes


def test_one_huge_word_is_refused_by_its_size_before_it_is_tokenized(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 300 MB "word" is one token, so max_seq never fired and the server spent 18 s and 1.4 GB
    on it; the byte limit refuses it before it is decoded or tokenized."""
    model = load_text_model(repo, "gated", monkeypatch)
    calls = []
    monkeypatch.setattr(model, "encode_text", lambda *a, **k: calls.append(a) or None)
    huge = b"w" * (DEFAULT_TEXT_LIMIT + 1)
    (response,) = model.execute([text_request(huge)])
    assert response.error.code == "INVALID_ARG"
    assert response.error.msg == (f"text 0 has {DEFAULT_TEXT_LIMIT + 1} bytes, more than the "
                                  f"limit of {DEFAULT_TEXT_LIMIT} bytes per text")
    assert calls == [] and model.server.calls == []


def test_the_request_limit_counts_every_row_and_the_limits_are_package_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = save_model(build_model(vocab=VOCAB), tmp_path / "c.onnx")
    package_model(source, tmp_path / "repo", PackageOptions(
        name="c", max_seq=MAX_SEQ, max_text_bytes=10, max_request_bytes=16))
    model = load_text_model(tmp_path / "repo", "c", monkeypatch)
    ok, long_text, too_many = model.execute([
        text_request("w3 w4 w5", "w6 w7"),  # 8 + 5 bytes
        text_request("w3 w4 w5 w6"),  # 11 bytes
        text_request("w3 w4 w5", "w6 w7 w8", "w9"),  # 8 + 8 + 2 bytes
    ])
    assert ok.error is None
    assert long_text.error.msg == "text 0 has 11 bytes, more than the limit of 10 bytes per text"
    assert too_many.error.msg == ("the request's texts hold 18 bytes, more than the limit of 16 "
                                  "bytes per request")
    assert check_repository(tmp_path / "repo").passed


def test_package_refuses_a_text_limit_above_the_request_limit() -> None:
    with pytest.raises(RepositoryError, match="max_text_bytes .* exceeds max_request_bytes"):
        PackageOptions(max_text_bytes=100, max_request_bytes=99)
    with pytest.raises(RepositoryError, match="max_request_bytes must be an integer >= 1"):
        PackageOptions(max_request_bytes=0)


@pytest.mark.parametrize("case", sorted(BAD_TEXTS))
def test_a_bad_text_fails_its_request_alone_with_invalid_arg(
    repo: Path, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = load_text_model(repo, "gated", monkeypatch)
    text, message = BAD_TEXTS[case]
    first, bad, last = model.execute([text_request(TEXTS[0]), text_request(text),
                                      text_request(TEXTS[1], TEXTS[2])])
    assert bad.error is not None and bad.error.code == FakeTritonError.INVALID_ARG
    assert re.search(message, bad.error.msg), bad.error.msg
    assert first.error is None and last.error is None
    want = expected(repo, "gated", [TEXTS[0], TEXTS[1], TEXTS[2]])
    np.testing.assert_allclose(np.concatenate([first.outputs["logits"], last.outputs["logits"]]),
                               want["logits"], rtol=0, atol=1e-6)


def test_a_bad_row_names_its_index_and_fails_the_whole_request(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = load_text_model(repo, "cls", monkeypatch)
    (response,) = model.execute([text_request("w3", "w4", "   ")])
    assert response.error.code == "INVALID_ARG" and response.error.msg.startswith("text 2 ")
    assert model.server.calls == []  # nothing reached the id model


@pytest.mark.parametrize(("inputs", "message"), [
    ({}, "missing input 'text'"),
    ({"text": np.array([b"w3"], dtype=object)}, r"must be \[batch, 1\]"),
    ({"text": np.array([[b"w3", b"w4"]], dtype=object)}, r"must be \[batch, 1\]"),
    ({"text": np.array([[3]], dtype=object)}, "must be BYTES"),
])
def test_a_malformed_request_is_invalid_arg(repo: Path, inputs: dict, message: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    model = load_text_model(repo, "cls", monkeypatch)
    (response,) = model.execute([FakeRequest(**inputs)])
    assert response.error.code == "INVALID_ARG" and re.search(message, response.error.msg)


def test_a_text_of_only_unknown_words_is_valid_and_maps_to_unk(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = load_text_model(repo, "gated", monkeypatch)
    (response,) = model.execute([text_request("zebra quagga okapi")])
    assert response.error is None
    want = expected(repo, "gated", ["zebra quagga okapi"])
    np.testing.assert_allclose(response.outputs["logits"], want["logits"], rtol=0, atol=1e-6)


def test_truncation_is_off_by_default_and_keeps_the_first_max_seq_tokens_when_on(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = save_model(build_model(vocab=VOCAB, gated=True), tmp_path / "g.onnx")
    package_model(source, tmp_path / "repo",
                  PackageOptions(name="g", max_seq=MAX_SEQ, truncate_text=True))
    model = load_text_model(tmp_path / "repo", "g", monkeypatch)
    long_text = " ".join(f"w{2 + i % 14}" for i in range(MAX_SEQ + 7))
    (response,) = model.execute([text_request(long_text)])
    assert response.error is None
    want = expected(tmp_path / "repo", "g", [long_text], truncate=True)
    np.testing.assert_allclose(response.outputs["logits"], want["logits"], rtol=0, atol=1e-6)
    assert strings(response.outputs["attended"]) == [[" ".join(want["predictions"][0].attended)]]


def test_an_id_model_failure_fails_the_batch_with_internal_and_the_model_stays_up(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = load_text_model(repo, "cls", monkeypatch)
    kept = break_id_model(model, "cls")
    responses = model.execute([text_request("w3"), text_request("w4")])
    assert [r.error.code for r in responses] == ["INTERNAL", "INTERNAL"]
    assert "the id model 'cls' failed" in responses[0].error.msg
    mend_id_model(model, "cls", kept)
    (response,) = model.execute([text_request("w3")])
    assert response.error is None

def test_text_interface_refuses_an_unknown_head() -> None:
    with pytest.raises(ValueError, match="unknown head"):
        text_interface(head="ranking", num_labels=2, gated=False)


# --------------------------------------------------------------------------- serving a text model


def test_serving_a_text_model_brings_its_id_model(repo: Path) -> None:
    from attndeploy.serving.server.launch import servable_models

    models, skipped = servable_models(repo, ["gated_text"])
    assert models == ["gated_text", "gated"] and skipped == {}
    models, _ = servable_models(repo, ["gated", "gated_text"])
    assert models == ["gated", "gated_text"]


def test_a_text_model_whose_id_model_cannot_be_served_is_left_out_saying_why(
    tmp_path: Path,
) -> None:
    from attndeploy.errors import ServerError
    from attndeploy.serving.server.launch import servable_models

    source = save_model(build_model(vocab=VOCAB), tmp_path / "m.onnx")
    package_model(source, tmp_path / "repo", PackageOptions(name="m", flavor="onnxruntime"))
    package_model(source, tmp_path / "repo", PackageOptions(name="p"))
    models, skipped = servable_models(tmp_path / "repo")
    assert models == ["p", "p_text"]
    assert "no 'onnxruntime' backend" in skipped["m"]
    assert skipped["m_text"].startswith("it calls the id model 'm', which is not served")
    with pytest.raises(ServerError, match="m_text: it calls the id model 'm'"):
        servable_models(tmp_path / "repo", ["m_text"])
    shutil.rmtree(tmp_path / "repo" / "p")
    with pytest.raises(ServerError, match=r"p_text: it calls the id model 'p', which is not in"):
        servable_models(tmp_path / "repo", ["p_text"])
