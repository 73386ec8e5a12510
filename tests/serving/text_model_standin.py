"""The stand-in for Triton's python backend that the text-model tests run the generated
`model.py` in: tiny packaged models (`packaged_repo`, each text model running its id model one
of the `CALLS` ways), a server whose BLS calls run the id model's own generated model.py, and a
session wrapper, so that `FakeServer.calls` records the id-model calls of either way; plus the
in-process onnxruntime answer the tests compare with (`expected`)."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as mc

from attndeploy.runtime.text import decode_batch, encode_text
from attndeploy.runtime.tokenizer import WordTokenizer, pad_sequences
from attndeploy.serving.packaging.repository import PackageOptions, package_model
from tests.serving.onnx_fixtures import build_model, fixture_vocab, save_model
from tests.serving.test_model_py import (
    FakeRequest,
    FakeTensor,
    FakeTritonError,
    _fake_pb_utils,
    load_model,
)

VOCAB = fixture_vocab(16)
MAX_SEQ = 24
FIXTURES = {"cls": {"custom_op": True}, "gated": {"gated": True},
            "tag": {"head": "tagging", "gated": True}}
TEXTS = ["w3 w4 W5, w9", "w2", "zebra quagga", "  w7\tw8 w9 w10 w11 w12 w13 w14 w15  ",
         " ".join(["w3"] * MAX_SEQ)]


CALLS = ("onnxruntime", "bls")  # how the text model runs its id model (ID_MODEL_CALL)


def packaged_repo(root: Path, call: str) -> Path:
    """`root/repo`: every FIXTURES model packaged with its text model, which runs its id model
    the way `call` names (one of CALLS)."""
    for name, kwargs in FIXTURES.items():
        source = save_model(build_model(vocab=VOCAB, **kwargs), root / "src" / f"{name}.onnx")  # type: ignore[arg-type]
        package_model(source, root / "repo", PackageOptions(
            name=name, max_seq=MAX_SEQ, text_bls=call == "bls"))
    return root / "repo"


def set_param(folder: Path, key: str, value: str) -> None:
    """Set one parameter of the model config in `folder`."""
    cfg = mc.ModelConfig()
    text_format.Parse((folder / "config.pbtxt").read_text(), cfg)
    cfg.parameters[key].string_value = value
    (folder / "config.pbtxt").write_text(text_format.MessageToString(cfg))


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
