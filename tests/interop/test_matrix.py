"""The interop matrix: every row of `matrix.ENTRIES` in every runtime users run it in.

A test per runtime and entry (ids `case-dtype-opN`), each comparing with the current
onnxruntime's plain run of the same file; tolerances and their measurements in matrix.py.
Triton's onnxruntime (1.24.4 in 26.05) runs opsets up to 25 (triton_releases.TRITON_ORT_MAX_OPSET):
a model one opset above it is refused, the limitation check-repo and deploy warn about (the
exporter's highest, 23, is below it: every row runs there).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from attndeploy.opspec.bodies import DOMAIN
from attndeploy.serving.packaging.triton_releases import TRITON_ORT_MAX_OPSET, TRITON_RELEASE
from attndeploy.variants.registry import variant_names
from tests.interop.matrix import (
    CROSS_VERSION,
    OPTIMIZER,
    REFERENCE,
    ROWS,
    SAME_RUNTIME,
    TRITON_ORT_VERSION,
    Matrix,
    Row,
    compare,
    entry_params,
    run_in_triton,
)
from tests.interop.ort_runner import SAVED_LEVELS, write_feeds


def test_every_registered_variant_has_a_float32_and_a_float16_row():
    for variant in variant_names():
        dtypes = {row.dtype for row in ROWS if row.variant == variant}
        assert dtypes == {"float32", "float16"}, f"variant {variant!r}: rows in {dtypes}"


def test_the_triton_onnxruntime_is_the_version_check_repo_names(matrix: Matrix):
    runs = matrix.get(ROWS[0], 18).triton
    assert runs["version"] == TRITON_ORT_VERSION
    assert runs["version"].rsplit(".", 1)[0] == TRITON_RELEASE.onnxruntime


@pytest.mark.parametrize("row, opset", entry_params())
def test_current_onnxruntime_runs_the_shipped_model(matrix: Matrix, row: Row, opset: int):
    artifacts = matrix.get(row, opset)
    model = onnx.load(str(artifacts.path), load_external_data=False)
    assert {o.domain: o.version for o in model.opset_import}[""] == opset
    if not row.inline and row.variant != "standard":
        assert any(n.domain == DOMAIN for n in model.graph.node), "custom nodes shipped"
    for key, value in artifacts.current.items():
        if key.startswith("plain/") and value.dtype.kind == "f":
            assert np.isfinite(value).all(), key


@pytest.mark.parametrize("row, opset", entry_params(runnable_in_triton=True))
def test_triton_onnxruntime_gives_the_current_outputs(matrix: Matrix, row: Row, opset: int):
    artifacts = matrix.get(row, opset)
    shipped = artifacts.triton["shipped"]
    assert "error" not in shipped, shipped.get("error")
    failures = compare(shipped, artifacts.current, "plain", "plain",
                       CROSS_VERSION[row.dtype], artifacts.tagging)
    assert not failures, "\n".join(failures)


def test_triton_onnxruntime_refuses_a_model_above_its_highest_opset(tmp_path: Path) -> None:
    """The limitation check-repo and deploy warn about: a model of one Identity at
    TRITON_ORT_MAX_OPSET + 1 does not load in Triton's onnxruntime, which says so."""
    from onnx import TensorProto, helper

    value = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 2])
    graph = helper.make_graph([helper.make_node("Identity", ["input_ids"], ["logits"])], "one",
                              [helper.make_tensor_value_info("input_ids", TensorProto.FLOAT,
                                                             [1, 2])], [value])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(
        "", TRITON_ORT_MAX_OPSET + 1)])
    model.ir_version = 10
    path = tmp_path / "above.onnx"
    onnx.save(model, str(path))
    feeds = tmp_path / "feeds.npz"
    write_feeds(feeds, [{"input_ids": np.zeros((1, 2), np.float32)}])
    _, (run,) = run_in_triton([path], feeds, tmp_path / "out")
    error = run.get("error", "")
    assert f"support for domain ai.onnx is till opset {TRITON_ORT_MAX_OPSET}" in error, error


SAVED_PARAMS = [
    pytest.param(*p.values, "current", id=f"current-{p.id}") for p in entry_params()
] + [
    pytest.param(*p.values, "triton", id=f"triton-{p.id}")
    for p in entry_params(runnable_in_triton=True)
]


@pytest.mark.parametrize("row, opset, runtime", SAVED_PARAMS)
def test_saved_optimized_model_gives_the_same_outputs(matrix: Matrix, row: Row, opset: int,
                                                      runtime: str):
    """onnxruntime saves its optimized graph (basic, extended, all), a new session loads the
    file: the outputs of the model it came from, in the same onnxruntime (Triton's too, where
    it runs the opset)."""
    artifacts = matrix.get(row, opset)
    runs = artifacts.current if runtime == "current" else artifacts.triton["shipped"]
    failures = []
    for level in SAVED_LEVELS:
        failures += compare(runs, runs, "plain", f"saved-{level}", SAME_RUNTIME[row.dtype],
                            artifacts.tagging)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("row, opset", entry_params())
def test_transformer_optimizer_leaves_a_model_with_the_same_logits(matrix: Matrix, row: Row,
                                                                   opset: int):
    """`optimize_model(path, model_type="bert", num_heads, hidden_size)` (what Optimum's
    ORTOptimizer runs): the result loads in onnxruntime and gives the shipped model's outputs;
    in Triton's onnxruntime too, where it runs the opset."""
    artifacts = matrix.get(row, opset)
    onnx.checker.check_model(str(artifacts.optimized_path))
    failures = compare(artifacts.optimized_current, artifacts.current, "plain", "plain",
                       OPTIMIZER[row.dtype], artifacts.tagging)
    if opset <= TRITON_ORT_MAX_OPSET:
        in_triton = artifacts.triton["optimized"]
        assert "error" not in in_triton, in_triton.get("error")
        failures += compare(in_triton, artifacts.triton["shipped"], "plain", "plain",
                            OPTIMIZER[row.dtype], artifacts.tagging)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("row, opset", entry_params())
def test_reference_evaluator_runs_the_shipped_model(matrix: Matrix, row: Row, opset: int):
    """onnx.reference on the file as shipped: model-local functions kept, not inlined."""
    artifacts = matrix.get(row, opset)
    failures = compare(artifacts.reference, artifacts.current, "plain", "plain",
                       REFERENCE[row.dtype], artifacts.tagging)
    assert not failures, "\n".join(failures)
