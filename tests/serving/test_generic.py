"""Generic models (a user's ONNX from `export --factory`): config from the graph, check-repo, and
the generated model.py run in-process with the stand-in of `test_model_py.py`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from google.protobuf import text_format
from onnx import TensorProto, helper
from tritonclient.grpc import model_config_pb2 as mc

from attndeploy.errors import RepositoryError
from attndeploy.serving.packaging.check_repo import check_repository
from attndeploy.serving.packaging.model_template import generate_generic_model_py
from attndeploy.serving.packaging.repository import PackageOptions, package_model

from .test_model_py import FakeRequest, load_model


def generic_onnx(path: Path, first: tuple[str, str] = ("n", "n"),
                 out_type: int = TensorProto.FLOAT) -> Path:
    """x [first0, T, 3] float, flag [first1, T] bool -> total [first0, 3] = sum over T of x,
    kept [first0, T] = flag; `attndeploy.version` only, as `export_model` writes."""
    graph = helper.make_graph(
        [helper.make_node("ReduceSum", ["x", "axes"], ["sum"], keepdims=0),
         helper.make_node("Cast", ["sum"], ["total"], to=out_type),
         helper.make_node("Identity", ["flag"], ["kept"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [first[0], "t", 3]),
         helper.make_tensor_value_info("flag", TensorProto.BOOL, [first[1], "t"])],
        [helper.make_tensor_value_info("total", out_type, [first[0], 3]),
         helper.make_tensor_value_info("kept", TensorProto.BOOL, [first[1], "t"])],
        [helper.make_tensor("axes", TensorProto.INT64, [1], [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    model.metadata_props.append(onnx.StringStringEntryProto(key="attndeploy.version",
                                                            value="0.1.0"))
    onnx.save(model, str(path))
    return path


def config_of(model_dir: Path) -> mc.ModelConfig:
    return text_format.Parse((model_dir / "config.pbtxt").read_text(), mc.ModelConfig())


@pytest.mark.parametrize("first, batch, dims", [
    (("n", "n"), 8, {"x": [-1, 3], "flag": [-1], "total": [3], "kept": [-1]}),
    (("n", "m"), 0, {"x": [-1, -1, 3], "flag": [-1, -1], "total": [-1, 3], "kept": [-1, -1]}),
    (("n", 2), 0, {"x": [-1, -1, 3], "flag": [2, -1], "total": [-1, 3], "kept": [2, -1]}),
], ids=["shared-batch", "no-shared-dim", "fixed-first-dim"])
def test_the_graph_drives_the_config_and_check_repo_passes(tmp_path, first, batch, dims):
    source = generic_onnx(tmp_path / "reg.onnx", first)
    (model,) = package_model(source, tmp_path / "repo", PackageOptions(flavor="python"))
    assert model.name == "reg" and model.to_dict()["kind"] == "generic"
    cfg = config_of(model.path)
    assert cfg.max_batch_size == batch and cfg.HasField("dynamic_batching") == (batch > 0)
    assert {e.name: list(e.dims) for e in (*cfg.input, *cfg.output)} == dims
    assert [mc.DataType.Name(e.data_type) for e in (*cfg.input, *cfg.output)] == [
        "TYPE_FP32", "TYPE_BOOL", "TYPE_FP32", "TYPE_BOOL"]
    assert not cfg.model_warmup and not (model.path / "labels.txt").exists()
    assert (model.path / "1" / "model.py").read_text() == generate_generic_model_py()
    report = check_repository(tmp_path / "repo")
    assert report and report.findings == [], report.summary()


def test_both_flavours_of_a_generic_model_pass_check_repo(tmp_path):
    source = generic_onnx(tmp_path / "reg.onnx")
    models = package_model(source, tmp_path / "repo", PackageOptions(flavor="both", kind="gpu"))
    assert [m.name for m in models] == ["reg_python", "reg_onnxruntime"]
    assert check_repository(tmp_path / "repo"), check_repository(tmp_path / "repo").summary()


@pytest.mark.parametrize("change, fragment", [
    (lambda cfg: cfg.input[0].dims.__setitem__(1, 4), "'x' has dims [-1, 4], expected [-1, 3]"),
    (lambda cfg: setattr(cfg.output[1], "data_type", mc.TYPE_INT8), "'kept' has data_type"),
    (lambda cfg: setattr(cfg, "max_batch_size", 0), "batch dim, so it must be >= 1"),
    (lambda cfg: setattr(cfg.output[0], "name", "sum"), "config has no output 'total'"),
], ids=["dims", "dtype", "batch", "name"])
def test_check_repo_catches_a_config_that_left_the_graph(tmp_path, change, fragment):
    (model,) = package_model(generic_onnx(tmp_path / "reg.onnx"), tmp_path / "repo")
    cfg = config_of(model.path)
    change(cfg)
    (model.path / "config.pbtxt").write_text(text_format.MessageToString(cfg))
    report = check_repository(tmp_path / "repo")
    assert not report and any(fragment in f.message for f in report.errors), report.summary()


def test_check_repo_wants_the_generic_model_py(tmp_path):
    (model,) = package_model(generic_onnx(tmp_path / "reg.onnx"), tmp_path / "repo")
    (model.path / "1" / "model.py").write_text(generate_generic_model_py() + "# mine\n")
    assert any("edited by hand" in f.message for f in check_repository(tmp_path / "repo").errors)


def test_a_type_triton_cannot_carry_is_refused_with_nothing_written(tmp_path):
    source = generic_onnx(tmp_path / "reg.onnx", out_type=TensorProto.STRING)
    with pytest.raises(RepositoryError, match="output 'total' has type STRING"):
        package_model(source, tmp_path / "repo")
    assert not (tmp_path / "repo").exists() or list((tmp_path / "repo").iterdir()) == []


def test_one_execute_groups_equal_shapes_and_answers_each_like_onnxruntime(tmp_path,
                                                                         monkeypatch):
    package_model(generic_onnx(tmp_path / "reg.onnx"), tmp_path / "repo")
    model = load_model(tmp_path / "repo", "reg", monkeypatch)
    session = ort.InferenceSession(str(tmp_path / "reg.onnx"), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    shapes = [(1, 4), (2, 4), (3, 7), (1, 4)]
    feeds = [{"x": rng.standard_normal((b, t, 3)).astype(np.float32),
              "flag": rng.random((b, t)) < 0.5} for b, t in shapes]
    bad = [FakeRequest(x=feeds[0]["x"].astype(np.float64), flag=feeds[0]["flag"]),
           FakeRequest(x=feeds[0]["x"][0], flag=feeds[0]["flag"]),
           FakeRequest(x=np.zeros((1, 4, 5), np.float32), flag=feeds[0]["flag"]),
           FakeRequest(x=feeds[0]["x"])]
    responses = model.execute([FakeRequest(**f) for f in feeds] + bad)
    for feed, response in zip(feeds, responses, strict=False):
        assert response.error is None
        want = session.run(["total", "kept"], feed)
        np.testing.assert_allclose(response.outputs["total"], want[0], rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(response.outputs["kept"], want[1])
    errors = [r.error for r in responses[len(feeds):]]
    assert [e.code for e in errors] == ["INVALID_ARG"] * 4
    assert "x must be float32, got float64" in errors[0].msg
    assert "x must have 3 dims" in errors[1].msg
    assert "x dim 2 must be 3, got 5" in errors[2].msg
    assert "missing input 'flag'" in errors[3].msg


def test_a_request_over_the_byte_limit_is_refused_before_it_runs(tmp_path, monkeypatch):
    """A generic model's free dims bound nothing: `max_request_bytes` does."""
    limit = 4 * 3 * 4 + 4  # x [1, 4, 3] float32 and flag [1, 4] bool fit exactly
    package_model(generic_onnx(tmp_path / "reg.onnx"), tmp_path / "repo",
                  PackageOptions(max_request_bytes=limit, max_text_bytes=limit))
    model = load_model(tmp_path / "repo", "reg", monkeypatch)
    fits = {"x": np.zeros((1, 4, 3), np.float32), "flag": np.ones((1, 4), bool)}
    over = {"x": np.zeros((1, 5, 3), np.float32), "flag": np.ones((1, 5), bool)}
    ok, refused = model.execute([FakeRequest(**fits), FakeRequest(**over)])
    assert ok.error is None
    assert refused.error.code == "INVALID_ARG"
    assert f"more than the limit of {limit} bytes per request" in refused.error.msg
