"""The runner interface (`attndeploy.interface.Runner`) that every backend implements, and the one
onnxruntime session factory (`attndeploy.runtime.sessions`) the onnxruntime runner builds on."""

from __future__ import annotations

import inspect

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from attndeploy.errors import ConfigError
from attndeploy.interface import Runner
from attndeploy.runtime.sessions import create_session, session_options
from attndeploy.serving.client.triton import TritonRunner
from attndeploy.validate import runners
from attndeploy.validate.runners import OrtRunner, ReferenceRunner, TorchRunner

SPINNING = "session.intra_op.allow_spinning"


def doubling_model() -> onnx.ModelProto:
    """y = x + x, float32 [n]: the smallest model whose output says it ran."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["y"])], "double",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.fixture
def model_path(tmp_path):
    path = tmp_path / "double.onnx"
    onnx.save(doubling_model(), str(path))
    return path


def test_the_validators_runner_interface_is_the_one_declared_in_attndeploy_interface():
    assert runners.Runner is Runner


@pytest.mark.parametrize("make", [
    lambda path: TorchRunner(model=None),
    lambda path: OrtRunner(path),
    lambda path: ReferenceRunner(path),
    lambda path: TritonRunner("localhost:1", "model"),  # nothing connects before `with`
], ids=["torch", "onnxruntime", "onnx-reference", "triton"])
def test_every_backend_implements_the_runner_interface(make, model_path):
    runner = make(model_path)
    assert isinstance(runner, Runner)
    assert isinstance(runner.name, str) and runner.name
    assert list(inspect.signature(runner.infer).parameters) == ["feed"]


def test_session_options_carry_every_setting():
    options = session_options(threads=2, optimization="none", log_severity=4, spinning=False)
    assert options.intra_op_num_threads == 2
    assert options.inter_op_num_threads == 1
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    assert options.log_severity_level == 4
    assert options.get_session_config_entry(SPINNING) == "0"
    default = session_options()
    assert default.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    assert default.intra_op_num_threads == 0  # onnxruntime's choice, one per core
    assert default.log_severity_level == 3


@pytest.mark.parametrize("settings", [
    {"threads": 0}, {"threads": True}, {"threads": "2"}, {"optimization": "fast"},
    {"optimization": 3},
])
def test_bad_session_settings_are_refused_with_a_config_error(settings):
    with pytest.raises(ConfigError):
        session_options(**settings)


def test_a_session_runs_from_a_path_bytes_or_a_model_proto(model_path):
    x = np.array([1.0, -2.5], dtype=np.float32)
    for source in (model_path, str(model_path), model_path.read_bytes(), doubling_model()):
        (y,) = create_session(source).run(None, {"x": x})
        np.testing.assert_array_equal(y, 2 * x)


def test_a_session_saves_its_optimized_graph_when_asked(model_path, tmp_path):
    target = tmp_path / "optimized.onnx"
    create_session(model_path, optimization=1, optimized_model_path=target)
    assert [n.op_type for n in onnx.load(str(target)).graph.node] == ["Add"]


def test_options_and_settings_together_are_refused(model_path):
    with pytest.raises(ConfigError, match="not both"):
        create_session(model_path, session_options(), threads=1)


@pytest.mark.parametrize(("optimization", "level"), [
    ("all", ort.GraphOptimizationLevel.ORT_ENABLE_ALL),
    ("none", ort.GraphOptimizationLevel.ORT_DISABLE_ALL),
])
def test_the_onnxruntime_runner_builds_its_session_with_the_factory(model_path, optimization,
                                                                    level):
    with OrtRunner(model_path, optimization=optimization, threads=1) as runner:
        options = runner.session.get_session_options()
        assert options.graph_optimization_level == level
        assert (options.intra_op_num_threads, options.inter_op_num_threads) == (1, 1)
        assert options.log_severity_level == 4  # failures are reported by RunnerError only
        out = runner.infer({"x": np.ones(3, dtype=np.float32)})
    np.testing.assert_array_equal(out["y"], np.full(3, 2.0, dtype=np.float32))
