"""`attndeploy optimize`: both methods on exports of the matrix, in process, JSON parsed.

The optimized file keeps the model-level interface and the input's metadata, gives the input's
outputs (the command checks; here they are checked again, in the current onnxruntime and in
Triton's), and the report names what was fused. A model whose optimized form differs is not
written.
"""

from __future__ import annotations

import json

import onnx
import pytest

from attndeploy import optimize
from attndeploy.cli import app as cli_app
from attndeploy.errors import ExportError
from attndeploy.opspec.bodies import DOMAIN
from tests.interop import ort_runner
from tests.interop.matrix import (
    OPTIMIZER,
    ROWS,
    Matrix,
    compare,
    feeds,
    run_in_triton,
)

EVOLVING_FP32, EVOLVING_FP16, GANET_FP32 = ROWS[6], ROWS[7], ROWS[4]


def run_cli(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr("sys.argv", ["attndeploy", *args])
    with pytest.raises(SystemExit) as info:
        cli_app.main()
    captured = capsys.readouterr()
    return info.value.code, captured.out, captured.err


@pytest.mark.parametrize("method", ["transformers", "onnxruntime"])
@pytest.mark.parametrize("row", [EVOLVING_FP32, EVOLVING_FP16, GANET_FP32],
                         ids=lambda row: row.label())
def test_optimize_writes_a_model_with_the_same_outputs_and_reports_the_fusions(
    matrix: Matrix, tmp_path, monkeypatch, capsys, row, method
):
    artifacts = matrix.get(row, 18)
    out = tmp_path / "optimized.onnx"
    code, stdout, stderr = run_cli(monkeypatch, capsys, "optimize", str(artifacts.path),
                                   "--out", str(out), "--method", method, "--json",
                                   "--keep-slower")  # speed: tests/test_optimize.py
    assert code == 0, stderr
    report = json.loads(stdout)
    assert report["method"] == method and report["path"] == str(out)
    assert [entry["shape"] for entry in report["parity"]] == ["1x1", "2x5", "3x16", "2x16"]
    assert report["generic"] is False  # a checkpoint's export: the grid's feeds, clipped
    assert list(report["timing"]["run_ms"]) == ["1x16", "8x16", "32x16"]

    model = onnx.load(str(out))
    before = {p.key: p.value for p in onnx.load(str(artifacts.path)).metadata_props}
    after = {p.key: p.value for p in model.metadata_props}
    changed = ("attndeploy.optimized", "attndeploy.inlined")
    assert {k: v for k, v in after.items() if k not in changed} == {
        k: v for k, v in before.items() if k not in changed}
    ran = json.loads(after["attndeploy.optimized"])
    custom = [n for n in model.graph.node if n.domain == DOMAIN]
    if method == "transformers":
        # opt-level 0: the fusions alone; every attndeploy node stays, with its function
        assert ran["tool"].startswith("onnxruntime.transformers") and ran["opt_level"] == 0
        assert custom and {n.op_type for n in custom} <= {f.name for f in model.functions}
        assert report["inlined"] is False and after["attndeploy.inlined"] == "false"
        assert report["fused"] and all(op.startswith("com.microsoft::") for op in report["fused"])
    else:
        assert ran["graph_optimization_level"] == "ORT_ENABLE_BASIC" and not custom
        assert report["inlined"] is True and after["attndeploy.inlined"] == "true"

    current = ort_runner.run_model(out, list(feeds()), tmp_path / "current", levels=())
    failures = compare(current, artifacts.current, "plain", "plain", OPTIMIZER[row.dtype],
                       artifacts.tagging)
    _, (in_triton,) = run_in_triton([out], artifacts.feeds_path, tmp_path / "triton")
    assert "error" not in in_triton, in_triton.get("error")
    failures += compare(in_triton, artifacts.triton["shipped"], "plain", "plain",
                        OPTIMIZER[row.dtype], artifacts.tagging)
    assert not failures, "\n".join(failures)


def test_the_evolving_model_fuses_its_residual_layer_norms(matrix: Matrix, tmp_path):
    result = optimize.optimize_model(matrix.get(EVOLVING_FP32, 18).path, tmp_path / "o.onnx",
                                     keep_slower=True)
    assert result.fused["com.microsoft::SkipLayerNormalization"] >= 2  # 2 layers
    assert result.num_heads == 2 and result.hidden_size == 16  # from the config metadata
    assert sum(result.ops_after.values()) < sum(result.ops_before.values())


def test_an_optimized_model_that_differs_is_not_written(matrix: Matrix, tmp_path,
                                                        monkeypatch):
    """The parity check compares with the input model: another model's logits fail it."""
    source = matrix.get(EVOLVING_FP32, 18).path
    other = onnx.load(str(matrix.get(ROWS[0], 18).path))  # standard: same interface
    monkeypatch.setattr(optimize, "_transformer_optimize", lambda *args: other)
    out = tmp_path / "o.onnx"
    with pytest.raises(ExportError, match="differs from the input model's.*nothing written"):
        optimize.optimize_model(source, out, keep_slower=True)
    assert not out.exists() and list(tmp_path.iterdir()) == []
