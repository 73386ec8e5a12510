"""The generated python-backend `model.py`, run in-process with a stand-in for
`triton_python_backend_utils` (the real server runs it in `test_python_backend.py`).

The stand-in has only what model.py uses: `Tensor`, `InferenceResponse`, `TritonError` and
`get_input_tensor_by_name`, with the python backend's call signatures.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as mc

from attndeploy.serving.packaging.model_template import (
    generate_model_py,
    parse_header,
    template_digest,
)
from attndeploy.serving.packaging.repository import PackageOptions, package_model

from .onnx_fixtures import build_model, random_request, save_model

# --------------------------------------------------------------------------- the stand-in


class FakeTensor:
    def __init__(self, name: str, array: np.ndarray) -> None:
        self._name, self._array = name, array

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array


class FakeTritonError(Exception):
    INVALID_ARG = "INVALID_ARG"
    INTERNAL = "INTERNAL"

    def __init__(self, msg: str, code: str = "UNKNOWN") -> None:
        super().__init__(msg)
        self.msg, self.code = msg, code


class FakeResponse:
    def __init__(
        self, output_tensors: list[FakeTensor] | None = None, error: FakeTritonError | None = None
    ) -> None:
        self.outputs = {t.name(): t.as_numpy() for t in output_tensors or []}
        self.error = error


class FakeRequest:
    def __init__(self, **inputs: np.ndarray) -> None:
        self.inputs = {name: FakeTensor(name, array) for name, array in inputs.items()}


def _fake_pb_utils() -> types.ModuleType:
    module = types.ModuleType("triton_python_backend_utils")
    module.Tensor = FakeTensor  # type: ignore[attr-defined]
    module.TritonError = FakeTritonError  # type: ignore[attr-defined]
    module.InferenceResponse = FakeResponse  # type: ignore[attr-defined]
    module.get_input_tensor_by_name = (  # type: ignore[attr-defined]
        lambda request, name: request.inputs.get(name)
    )
    module.triton_string_to_numpy = (  # type: ignore[attr-defined]  # as the python backend's
        lambda name: {"TYPE_FP32": np.float32, "TYPE_FP16": np.float16, "TYPE_FP64": np.float64,
                      "TYPE_INT64": np.int64, "TYPE_INT32": np.int32, "TYPE_INT8": np.int8,
                      "TYPE_UINT8": np.uint8, "TYPE_BOOL": np.bool_}[name]
    )
    return module


FIXTURES = {"cls": {"custom_op": True}, "gated": {"gated": True}, "tag": {"head": "tagging"}}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("model_py")
    for name, kwargs in FIXTURES.items():
        source = save_model(build_model(**kwargs), root / "src" / f"{name}.onnx")  # type: ignore[arg-type]
        package_model(source, root / "repo", PackageOptions(name=name, max_seq=24))
    return root / "repo"


def load_model(repo: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Import `<repo>/<name>/1/model.py` and `initialize` it as the python backend does."""
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", _fake_pb_utils())
    path = repo / name / "1" / "model.py"
    spec = importlib.util.spec_from_file_location(f"generated_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cfg = mc.ModelConfig()
    text_format.Parse((repo / name / "config.pbtxt").read_text(), cfg)
    model = module.TritonPythonModel()
    as_json = json_format.MessageToDict(cfg, preserving_proto_field_name=True)
    model.initialize({
        "model_config": json.dumps(as_json),
        "model_repository": str(repo / name),
        "model_version": "1",
    })
    return model


def run_alone(repo: Path, name: str, ids: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(str(repo / name / "1" / "model.onnx"),
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, {"input_ids": ids, "attention_mask": mask}),
                    strict=True))


# --------------------------------------------------------------------------- tests


def test_generated_text_is_stable_and_names_its_origin() -> None:
    text = generate_model_py()
    assert text == generate_model_py()
    header = parse_header(text)
    assert header is not None and header.version == "0.1.0"
    assert header.digest == template_digest()
    compile(text, "model.py", "exec")
    assert 'INPUT_IDS = "input_ids"' in text and 'GATES = "gates"' in text


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_one_execute_of_mixed_lengths_equals_each_request_alone_bit_for_bit(
    repo: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = load_model(repo, name, monkeypatch)
    rng = np.random.default_rng(7)
    shapes = [(1, 3), (2, 24), (3, 1), (1, 11), (2, 11)]
    requests = [random_request(rng, b, s) for b, s in shapes]
    responses = model.execute([FakeRequest(input_ids=i, attention_mask=m) for i, m in requests])
    assert len(responses) == len(requests)
    for (ids, mask), response in zip(requests, responses, strict=True):
        assert response.error is None
        alone = run_alone(repo, name, ids, mask)
        assert response.outputs.keys() == alone.keys()
        for key, expected in alone.items():
            got = response.outputs[key]
            assert got.dtype == expected.dtype and got.shape == expected.shape
            assert got.tobytes() == expected.tobytes(), f"{key} differs for shape {ids.shape}"


BAD_REQUESTS = {
    "int32 ids": ({"input_ids": np.zeros((1, 4), np.int32),
                   "attention_mask": np.ones((1, 4), np.int64)}, "input_ids must be INT64"),
    "rank 3": ({"input_ids": np.zeros((1, 1, 4), np.int64),
                "attention_mask": np.ones((1, 1, 4), np.int64)}, r"must be \[batch, seq\]"),
    "seq above max": ({"input_ids": np.zeros((1, 25), np.int64),
                       "attention_mask": np.ones((1, 25), np.int64)}, "exceeds the maximum of 24"),
    "mismatched shapes": ({"input_ids": np.zeros((1, 4), np.int64),
                           "attention_mask": np.ones((1, 5), np.int64)}, "the same shape"),
    "all-zero mask": ({"input_ids": np.zeros((2, 4), np.int64),
                       "attention_mask": np.array([[1, 0, 0, 0], [0, 0, 0, 0]])},
                      r"row\(s\) \[1\] have no real token"),
    "mask value 2": ({"input_ids": np.zeros((1, 4), np.int64),
                      "attention_mask": np.full((1, 4), 2, np.int64)}, "must be 0 .* or 1"),
    "id out of range": ({"input_ids": np.full((1, 4), 16, np.int64),
                         "attention_mask": np.ones((1, 4), np.int64)}, r"\[0, 16\)"),
    "negative id": ({"input_ids": np.full((1, 4), -1, np.int64),
                     "attention_mask": np.ones((1, 4), np.int64)}, r"\[0, 16\)"),
    "missing mask": ({"input_ids": np.zeros((1, 4), np.int64)}, "missing input 'attention_mask'"),
    "empty": ({"input_ids": np.zeros((1, 0), np.int64),
               "attention_mask": np.zeros((1, 0), np.int64)}, "empty request"),
}


@pytest.mark.parametrize("case", sorted(BAD_REQUESTS))
def test_a_bad_request_fails_alone_while_the_others_in_the_call_succeed(
    repo: Path, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = load_model(repo, "gated", monkeypatch)
    inputs, message = BAD_REQUESTS[case]
    rng = np.random.default_rng(3)
    good = [random_request(rng, 1, 6), random_request(rng, 2, 9)]
    requests = [FakeRequest(input_ids=good[0][0], attention_mask=good[0][1]),
                FakeRequest(**inputs),
                FakeRequest(input_ids=good[1][0], attention_mask=good[1][1])]
    first, bad, last = model.execute(requests)
    assert bad.error is not None and bad.error.code == FakeTritonError.INVALID_ARG
    assert re.search(message, bad.error.msg), bad.error.msg
    for (ids, mask), response in ((good[0], first), (good[1], last)):
        assert response.error is None
        alone = run_alone(repo, "gated", ids, mask)
        assert response.outputs["logits"].tobytes() == alone["logits"].tobytes()
        assert response.outputs["gates"].tobytes() == alone["gates"].tobytes()


def test_an_id_request_of_100_mb_is_refused_by_its_shape_without_running(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An id model needs no byte limit of its own: seq > max_seq is refused before any work."""
    model = load_model(repo, "cls", monkeypatch)
    ran = []
    monkeypatch.setattr(model, "_run", lambda *args: ran.append(args))
    huge = np.ones((1, 100 * 2**20 // 16), np.int64)  # ids + mask: 100 MB
    (response,) = model.execute([FakeRequest(input_ids=huge, attention_mask=huge)])
    assert response.error.code == "INVALID_ARG"
    assert "exceeds the maximum of 24" in response.error.msg
    assert ran == []


def test_an_execute_call_of_only_bad_requests_answers_each(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = load_model(repo, "cls", monkeypatch)
    inputs = BAD_REQUESTS["seq above max"][0]
    responses = model.execute([FakeRequest(**inputs), FakeRequest(**inputs)])
    assert [r.error.code for r in responses] == ["INVALID_ARG", "INVALID_ARG"]
