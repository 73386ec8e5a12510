"""The text model `<name>_text` without a server: what `package` writes, what check-repo
accepts and refuses, and the generated model.py run in-process with a stand-in for Triton's
python backend. Every test on the packaged repository runs for both ways the text model runs its
id model (`CALLS`): the id model's ONNX in its own onnxruntime session, and a BLS call that the
stand-in answers with the id model's own generated model.py. Either way the id-model calls are
recorded in `FakeServer.calls` (the real server runs both in `test_text_served.py`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as mc

import attndeploy
from attndeploy.errors import RepositoryError
from attndeploy.runtime.contract import CONTRACT_VERSION, decode_wire
from attndeploy.runtime.shipping import SHIPPED_MODULES, runtime_sources
from attndeploy.runtime.text import decode_batch, encode_text
from attndeploy.runtime.tokenizer import WordTokenizer, pad_sequences
from attndeploy.serving.packaging.check_repo import check_repository
from attndeploy.serving.packaging.model_template import generate_text_model_py
from attndeploy.serving.packaging.onnx_info import load_onnx_graph, read_model_info
from attndeploy.serving.packaging.repository import PackageOptions, package_model
from attndeploy.serving.packaging.text_model import text_interface
from tests.runtime.records import assert_same_record

from .onnx_fixtures import build_model, fixture_vocab, save_model
from .test_model_py import FakeRequest, FakeTensor, FakeTritonError, _fake_pb_utils, load_model

VOCAB = fixture_vocab(16)
MAX_SEQ = 24
FIXTURES = {"cls": {"custom_op": True}, "gated": {"gated": True},
            "tag": {"head": "tagging", "gated": True}}
TEXTS = ["w3 w4 W5, w9", "w2", "zebra quagga", "  w7\tw8 w9 w10 w11 w12 w13 w14 w15  ",
         " ".join(["w3"] * MAX_SEQ)]


CALLS = ("onnxruntime", "bls")  # how the text model runs its id model (ID_MODEL_CALL)


@pytest.fixture(scope="module", params=CALLS)
def repo(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp(f"text_model_{request.param}")
    for name, kwargs in FIXTURES.items():
        source = save_model(build_model(vocab=VOCAB, **kwargs), root / "src" / f"{name}.onnx")  # type: ignore[arg-type]
        package_model(source, root / "repo", PackageOptions(
            name=name, max_seq=MAX_SEQ, text_bls=request.param == "bls"))
    return root / "repo"


def call_of(repo: Path, base: str = "cls") -> str:
    """How `<base>_text` in `repo` runs its id model (its ID_MODEL_CALL)."""
    cfg = mc.ModelConfig()
    text_format.Parse((repo / f"{base}_text" / "config.pbtxt").read_text(), cfg)
    return cfg.parameters["ID_MODEL_CALL"].string_value


def copy_repo(repo: Path, tmp_path: Path) -> Path:
    target = tmp_path / "repo"
    shutil.copytree(repo, target)
    return target


# --------------------------------------------------------------------------- the stand-in's BLS


class FakeBlsResponse:
    def __init__(self, response: Any) -> None:
        self.outputs = getattr(response, "outputs", {})
        self._error = response.error

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> Any:
        return types_error(self._error.msg)


def types_error(message: str) -> Any:
    class _Error:
        def message(self) -> str:
            return message

    return _Error()


class FakeServer:
    """The models a BLS request can reach: {name: loaded id model (its generated model.py)};
    `calls`: every id-model call, by BLS or through a text model's own session
    (`RecordingSession`), as (id model, version, input_ids shape)."""

    def __init__(self) -> None:
        self.models: dict[str, Any] = {}
        self.calls: list[tuple[str, int, tuple[int, ...]]] = []

    def request_class(self) -> type:
        server = self

        class FakeInferenceRequest:
            def __init__(self, *, model_name: str, inputs: list[FakeTensor],
                         requested_output_names: list[str], model_version: int = -1) -> None:
                self.model_name, self.model_version = model_name, model_version
                self.inputs = {t.name(): t.as_numpy() for t in inputs}
                self.requested = requested_output_names

            def exec(self) -> FakeBlsResponse:
                server.calls.append((self.model_name, self.model_version,
                                     self.inputs["input_ids"].shape))
                if self.model_name not in server.models:
                    error = FakeTritonError(f"Request for unknown model: '{self.model_name}'")
                    return FakeBlsResponse(types_response(error))
                (response,) = server.models[self.model_name].execute([FakeRequest(**self.inputs)])
                return FakeBlsResponse(response)

        return FakeInferenceRequest


class RecordingSession:
    """A text model's onnxruntime session, its calls recorded in the server's `calls`; `fail`
    makes the next calls raise (an id model that breaks)."""

    def __init__(self, session: Any, server: FakeServer, name: str, version: int) -> None:
        self.session, self.server, self.name, self.version = session, server, name, version
        self.fail = False

    def run(self, names: list[str], feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        self.server.calls.append((self.name, self.version, feed["input_ids"].shape))
        if self.fail:
            raise RuntimeError("the session broke")
        return self.session.run(names, feed)


def break_id_model(model: Any, base: str) -> Any:
    """Make the text model's id-model calls fail; return what `mend_id_model` puts back."""
    if model.session is not None:
        model.session.fail = True
        return None
    return model.server.models.pop(base)


def mend_id_model(model: Any, base: str, kept: Any) -> None:
    if model.session is not None:
        model.session.fail = False
    else:
        model.server.models[base] = kept


def types_response(error: Any) -> Any:
    class _Response:
        outputs: dict[str, np.ndarray] = {}

    response = _Response()
    response.error = error  # type: ignore[attr-defined]
    return response


@contextlib.contextmanager
def own_modules() -> Iterator[None]:
    """Put back this process's attndeploy modules after a text model loaded its own copies."""
    def ours() -> dict[str, Any]:
        return {k: v for k, v in sys.modules.items()
                if k == "attndeploy" or k.startswith("attndeploy.")}

    saved = ours()
    try:
        yield
    finally:
        for name in ours():
            if name not in saved:
                del sys.modules[name]
        sys.modules.update(saved)


def load_text_model(repo: Path, base: str, monkeypatch: pytest.MonkeyPatch,
                    server: FakeServer | None = None, initialize: bool = True) -> Any:
    """`<repo>/<base>_text/1/model.py`, its BLS reaching `<base>` (also loaded in-process),
    or its own session recording its calls."""
    server = server or FakeServer()
    if base not in server.models:
        server.models[base] = load_model(repo, base, monkeypatch)
    fake = _fake_pb_utils()
    fake.InferenceRequest = server.request_class()  # type: ignore[attr-defined]
    fake.get_output_tensor_by_name = (  # type: ignore[attr-defined]
        lambda response, name: FakeTensor(name, response.outputs[name])
        if name in response.outputs else None)
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", fake)
    name = f"{base}_text"
    spec = importlib.util.spec_from_file_location(f"generated_{name}",
                                                  repo / name / "1" / "model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.TritonPythonModel()
    model.server, model.module = server, module
    if initialize:
        initialize_model(model, repo, name)
    return model


def initialize_model(model: Any, repo: Path, name: str) -> None:
    cfg = mc.ModelConfig()
    text_format.Parse((repo / name / "config.pbtxt").read_text(), cfg)
    args = {"model_config": json.dumps(json_format.MessageToDict(
        cfg, preserving_proto_field_name=True)), "model_repository": str(repo / name),
        "model_version": "1"}
    with own_modules():
        model.initialize(args)
    if model.session is not None and hasattr(model, "server"):
        model.session = RecordingSession(model.session, model.server, model.id_model,
                                         model.id_version)


def text_request(*texts: str | bytes) -> FakeRequest:
    return FakeRequest(text=np.array([[t.encode() if isinstance(t, str) else t] for t in texts],
                                     dtype=object))


def expected(repo: Path, base: str, texts: list[str], *, truncate: bool = False
             ) -> dict[str, np.ndarray]:
    """In-process onnxruntime on the id model's file, on the runtime's tokenization."""
    tokenizer = WordTokenizer(VOCAB)
    encoded = [encode_text(tokenizer, t, max_seq=MAX_SEQ, truncate=truncate) for t in texts]
    ids, mask = pad_sequences([e.ids for e in encoded])
    session = ort.InferenceSession(str(repo / base / "1" / "model.onnx"),
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    outputs = dict(zip(names, session.run(names, {"input_ids": ids, "attention_mask": mask}),
                       strict=True))
    labels = [f"label_{i}" for i in range(3)]
    predictions = decode_batch(outputs["logits"], outputs.get("gates"),
                               [e.tokens for e in encoded], labels,
                               tagging=outputs["logits"].ndim == 3)
    return {"logits": outputs["logits"], "predictions": predictions, "mask": mask}


def strings(array: np.ndarray) -> list:
    return [[v.decode() for v in row] for row in array.tolist()]


# --------------------------------------------------------------------------- package


def test_package_writes_a_text_model_beside_every_id_model_with_a_tokenizer(repo: Path) -> None:
    assert sorted(p.name for p in repo.iterdir()) == sorted(
        [*FIXTURES, *(f"{n}_text" for n in FIXTURES)])
    files = sorted(str(p.relative_to(repo / "gated_text"))
                   for p in (repo / "gated_text").rglob("*") if p.is_file())
    assert files == sorted(["config.pbtxt", "labels.txt", "tokenizer.json", "1/model.py",
                            *(f"1/{relative}" for _, relative in SHIPPED_MODULES)])
    assert json.loads((repo / "gated_text" / "tokenizer.json").read_text()) == {
        "type": "word", "vocab": VOCAB}
    assert (repo / "gated_text" / "1" / "model.py").read_text() == generate_text_model_py()


def test_the_shipped_runtime_is_the_package_s_own_files_byte_for_byte(repo: Path) -> None:
    package_root = Path(attndeploy.__file__).parent.parent
    assert set(runtime_sources()) == {relative for _, relative in SHIPPED_MODULES}
    for relative, content in runtime_sources().items():
        assert content == (package_root / relative).read_bytes(), relative
        assert (repo / "cls_text" / "1" / relative).read_bytes() == content, relative


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


# --------------------------------------------------------------------------- check-repo


def test_check_repo_accepts_the_text_models(repo: Path) -> None:
    report = check_repository(repo)
    assert report.passed, report.summary()
    assert not report.warnings


BREAKAGES = {
    "edited model.py": (lambda r: (r / "gated_text/1/model.py").write_text(
        (r / "gated_text/1/model.py").read_text() + "# mine\n"), "edited by hand"),
    "changed runtime copy": (lambda r: (r / "gated_text/1/attndeploy/runtime/text.py")
                             .write_text("x = 1\n"), "differs from this attndeploy"),
    "missing runtime copy": (lambda r: (r / "gated_text/1/attndeploy/errors.py").unlink(),
                             "errors.py is missing"),
    "missing id model": (lambda r: shutil.rmtree(r / "gated"), "id model 'gated'"),
    "other tokenizer": (lambda r: (r / "gated_text/tokenizer.json").write_text(
        json.dumps({"type": "word", "vocab": VOCAB[:-1]})), "tokenizer.json differs"),
    "other labels": (lambda r: (r / "gated_text/labels.txt").write_text("a\nb\nc\n"),
                     "labels.txt differs"),
    "max_seq above the id model's": (lambda r: _set_param(r / "gated_text", "MAX_SEQ", "99"),
                                     r"MAX_SEQ is '99'"),
    "an older prediction contract": (
        lambda r: _set_param(r / "gated_text", "CONTRACT_VERSION", "1"),
        r"CONTRACT_VERSION is '1', this attndeploy answers prediction contract 2; re-package"),
    "other label names in the config": (
        lambda r: _set_param(r / "gated_text", "LABEL_NAMES", '["x", "y", "z"]'),
        r"LABEL_NAMES differs from its id model's labels"),
    "text byte limit not a number": (
        lambda r: _set_param(r / "gated_text", "MAX_TEXT_BYTES", "lots"),
        r"MAX_TEXT_BYTES is 'lots'; it must be a positive number of bytes"),
}


def _set_param(folder: Path, key: str, value: str) -> None:
    cfg = mc.ModelConfig()
    text_format.Parse((folder / "config.pbtxt").read_text(), cfg)
    cfg.parameters[key].string_value = value
    (folder / "config.pbtxt").write_text(text_format.MessageToString(cfg))


# what each way of running the id model needs (the other way does not need it)
CALL_BREAKAGES = {
    "onnxruntime": (lambda r: _set_param(r / "gated_text", "ORT_THREADS", "0"),
                    r"ORT_THREADS is '0'; a text model that runs its id model's ONNX needs"),
    "bls": (lambda r: _set_max_batch(r / "gated_text", 16),
            r"max_batch_size 16 exceeds its id model's 8"),
}


def _set_max_batch(folder: Path, size: int) -> None:
    cfg = mc.ModelConfig()
    text_format.Parse((folder / "config.pbtxt").read_text(), cfg)
    cfg.max_batch_size = size
    (folder / "config.pbtxt").write_text(text_format.MessageToString(cfg))


def test_check_repo_holds_each_way_of_running_the_id_model_to_what_it_needs(
    repo: Path, tmp_path: Path
) -> None:
    call = call_of(repo, "gated")
    other = next(c for c in CALLS if c != call)
    for case, should_fail in ((call, True), (other, False)):
        broken = copy_repo(repo, tmp_path / case)
        CALL_BREAKAGES[case][0](broken)
        errors = [f.message for f in check_repository(broken).errors if f.model == "gated_text"]
        assert any(re.search(CALL_BREAKAGES[case][1], e) for e in errors) == should_fail, errors
    broken = copy_repo(repo, tmp_path / "unknown")
    _set_param(broken / "gated_text", "ID_MODEL_CALL", "grpc")
    errors = [f.message for f in check_repository(broken).errors if f.model == "gated_text"]
    assert errors == ["parameter ID_MODEL_CALL is 'grpc'; it must be one of onnxruntime, bls "
                      "(re-package the model)"]


@pytest.mark.parametrize("case", sorted(BREAKAGES))
def test_check_repo_names_what_is_wrong_with_a_text_model(repo: Path, tmp_path: Path,
                                                           case: str) -> None:
    broken = copy_repo(repo, tmp_path)
    breakage, message = BREAKAGES[case]
    breakage(broken)
    report = check_repository(broken)
    assert not report.passed
    errors = [f.message for f in report.errors if f.model == "gated_text"]
    assert any(re.search(message, e) for e in errors), report.summary()


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


def test_a_text_model_that_cannot_run_its_id_model_fails_at_load_saying_why(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = copy_repo(repo, tmp_path)
    _set_param(broken / "cls_text", "ID_MODEL_CALL", "grpc")
    model = load_text_model(broken, "cls", monkeypatch, initialize=False)
    with pytest.raises(RuntimeError, match=r"ID_MODEL_CALL is 'grpc'; it must be 'onnxruntime' "
                                           r"or 'bls'; re-package"):
        initialize_model(model, broken, "cls_text")
    if call_of(repo) == "bls":
        return  # by BLS the id model's file and onnxruntime are the id model's own affair
    model = load_text_model(repo, "cls", monkeypatch, initialize=False)
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as if it were not installed
    with pytest.raises(RuntimeError, match=r"with onnxruntime, which the server's Python cannot "
                                           r"import .*re-package with --text-bls"):
        initialize_model(model, repo, "cls_text")
    monkeypatch.delitem(sys.modules, "onnxruntime")
    (broken / "cls" / "1" / "model.onnx").unlink()
    _set_param(broken / "cls_text", "ID_MODEL_CALL", "onnxruntime")
    model = load_text_model(repo, "cls", monkeypatch, initialize=False)
    with pytest.raises(RuntimeError, match=r"cls/1/model.onnx is missing: the text model runs "
                                           r"its id model's ONNX file itself; re-package"):
        initialize_model(model, broken, "cls_text")


def test_the_model_runs_the_shipped_copies_not_the_installed_package(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = load_text_model(repo, "cls", monkeypatch)
    version_dir = (repo / "cls_text" / "1").resolve()
    for function in (model.encode_text, model.decode_batch, model.pad_sequences):
        assert Path(function.__code__.co_filename).resolve().is_relative_to(version_dir)
    assert sys.modules["attndeploy.runtime.text"].__file__ != model.encode_text.__code__.co_filename


def test_an_unknown_tokenizer_type_fails_at_load_naming_the_known_ones(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = copy_repo(repo, tmp_path)
    (broken / "cls_text" / "tokenizer.json").write_text(json.dumps({"type": "bpe"}))
    model = load_text_model(broken, "cls", monkeypatch, initialize=False)
    with pytest.raises(RuntimeError, match=r"tokenizer type 'bpe' is not one this model can "
                                           r"load \(word, wordpiece\)"):
        initialize_model(model, broken, "cls_text")


def test_a_tokenizer_whose_package_the_server_lacks_fails_at_load_naming_it(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """WordPiece (converted Hugging Face models) needs `tokenizers` (TOKENIZER_TYPES): a server
    whose Python lacks it refuses to load the model, saying what to install."""
    import sys

    broken = copy_repo(repo, tmp_path)
    (broken / "cls_text" / "tokenizer.json").write_text(json.dumps({"type": "wordpiece"}))
    model = load_text_model(broken, "cls", monkeypatch, initialize=False)
    assert model.module.TOKENIZER_TYPES["wordpiece"]["requires"] == "tokenizers"
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # as if it were not installed
    with pytest.raises(RuntimeError, match=r"the 'wordpiece' tokenizer needs the Python package "
                                           r"'tokenizers'.*pip install tokenizers"):
        initialize_model(model, broken, "cls_text")


STANDALONE = textwrap.dedent('''
    """Run a packaged text model with attndeploy NOT importable (as in an NGC container)."""
    import importlib.abc, importlib.util, json, sys, types
    import numpy as np

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name == "attndeploy" or name.startswith("attndeploy."):
                raise ModuleNotFoundError(f"attndeploy is not installed here ({name})")
            return None

    sys.meta_path.insert(0, Block())
    try:
        import attndeploy.errors  # noqa: F401
        raise SystemExit("the block does not work")
    except ModuleNotFoundError:
        pass

    class Tensor:
        def __init__(self, name, array): self._name, self._array = name, array
        def name(self): return self._name
        def as_numpy(self): return self._array

    class TritonError(Exception):
        INVALID_ARG, INTERNAL = "INVALID_ARG", "INTERNAL"
        def __init__(self, msg, code="UNKNOWN"):
            super().__init__(msg)
            self.msg, self.code = msg, code

    class Response:
        def __init__(self, output_tensors=None, error=None):
            self.outputs = {t.name(): t.as_numpy() for t in output_tensors or []}
            self.error = error
        def has_error(self): return self.error is not None

    class Request:
        def __init__(self, **inputs): self.inputs = {k: Tensor(k, v) for k, v in inputs.items()}

    class InferenceRequest:
        def __init__(self, model_name, inputs, requested_output_names, model_version=-1):
            self.ids = dict((t.name(), t.as_numpy()) for t in inputs)["input_ids"]
        def exec(self):
            logits = np.stack([self.ids.sum(1), -self.ids.sum(1), 0 * self.ids.sum(1)], 1)
            return Response([Tensor("logits", logits.astype(np.float32))])

    pb = types.ModuleType("triton_python_backend_utils")
    pb.Tensor, pb.TritonError, pb.InferenceResponse = Tensor, TritonError, Response
    pb.InferenceRequest = InferenceRequest
    pb.get_input_tensor_by_name = lambda r, n: r.inputs.get(n)
    pb.get_output_tensor_by_name = lambda r, n: Tensor(n, r.outputs[n])
    sys.modules["triton_python_backend_utils"] = pb

    folder, config = sys.argv[1], sys.argv[2]
    spec = importlib.util.spec_from_file_location("model", folder + "/1/model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.TritonPythonModel()
    model.initialize({"model_config": config, "model_repository": folder, "model_version": "1"})
    texts = np.array([[b"w3 w4"], [b"W5, zebra"]], dtype=object)
    (response,) = model.execute([Request(text=texts)])
    print(json.dumps({"label": [v.decode() for v in response.outputs["label"][:, 0]],
                      "logits": response.outputs["logits"].tolist(),
                      "files": sorted({m.__file__ for n, m in sys.modules.items()
                                       if n.startswith("attndeploy")})}))
''')


def test_the_text_model_runs_where_attndeploy_is_not_installed(repo: Path, tmp_path: Path
                                                                ) -> None:
    script = tmp_path / "standalone.py"
    script.write_text(STANDALONE)
    cfg = mc.ModelConfig()
    text_format.Parse((repo / "cls_text" / "config.pbtxt").read_text(), cfg)
    config = json.dumps(json_format.MessageToDict(cfg, preserving_proto_field_name=True))
    result = subprocess.run([sys.executable, str(script), str(repo / "cls_text"), config],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    if call_of(repo) == "bls":  # the stand-in's id model sums the ids
        # "w3 w4" -> ids 3, 4 (sum 7); "W5, zebra" -> w5 , zebra -> 5, <unk>=1, <unk>=1 (sum 7)
        assert answer["logits"] == [[7.0, -7.0, 0.0], [7.0, -7.0, 0.0]]
        assert answer["label"] == ["label_0", "label_0"]
    else:  # the id model's ONNX, in onnxruntime
        want = expected(repo, "cls", ["w3 w4", "W5, zebra"])
        np.testing.assert_allclose(answer["logits"], want["logits"], rtol=0, atol=1e-6)
        assert answer["label"] == [p.label for p in want["predictions"]]
    version_dir = str((repo / "cls_text" / "1").resolve())
    assert answer["files"] and all(str(Path(f).resolve()).startswith(version_dir)
                                   for f in answer["files"])


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
