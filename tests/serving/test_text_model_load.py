"""Loading a generated text model: what fails at `initialize` and says why, the shipped runtime
copies it runs, and a run where attndeploy is not installed (as in an NGC container)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as mc

from tests.serving.text_model_standin import (
    CALLS,
    call_of,
    copy_repo,
    expected,
    initialize_model,
    load_text_model,
    packaged_repo,
    set_param,
)


@pytest.fixture(scope="module", params=CALLS)
def repo(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return packaged_repo(tmp_path_factory.mktemp(f"text_model_{request.param}"), request.param)


def test_a_text_model_that_cannot_run_its_id_model_fails_at_load_saying_why(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = copy_repo(repo, tmp_path)
    set_param(broken / "cls_text", "ID_MODEL_CALL", "grpc")
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
    set_param(broken / "cls_text", "ID_MODEL_CALL", "onnxruntime")
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
    family = Path(model.family.__file__).resolve()  # the family's decoder: the copy too
    assert family == version_dir / "attndeploy/families/text_classification/runtime.py"


def test_an_unknown_tokenizer_type_fails_at_load_naming_the_known_ones(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = copy_repo(repo, tmp_path)
    (broken / "cls_text" / "tokenizer.json").write_text(json.dumps({"type": "bpe"}))
    model = load_text_model(broken, "cls", monkeypatch, initialize=False)
    with pytest.raises(RuntimeError, match=r"tokenizer type 'bpe' is not one this model can "
                                           r"load \(char, space, word, wordpiece\)"):
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

