"""`optimize` on any ONNX model: an `export_model` file of a tiny embedding model, checked
equal in onnxruntime on feeds made from its signature, written only when faster on the grid.

Timings come through the `time_on_grid` seam (real timings of a tiny model are noise); the
exports of a checkpoint and the Triton side are tests/interop/test_optimize_command.py's.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch import Tensor, nn

from attndeploy import optimize
from attndeploy.cli import app as cli_app
from attndeploy.errors import ExportError
from attndeploy.export import export_model

VOCAB, D = 50, 8


class TinyEncoder(nn.Module):
    """ids [B, T] and an int mask [B, T] -> pooled states [B, D]: an embedding table (what the
    feeds bound the ids by), a LayerNorm and a Linear (what the optimizer can touch)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(VOCAB, D)
        self.norm = nn.LayerNorm(D)
        self.proj = nn.Linear(D, D)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        x = self.proj(self.norm(self.embed(input_ids)))  # [B, T, D]
        weights = attention_mask.unsqueeze(-1).to(x.dtype)  # [B, T, 1]
        return (x * weights).sum(1) / weights.sum(1).clamp(min=1)  # [B, D]


@pytest.fixture(scope="module")
def generic_onnx(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("generic") / "tiny.onnx"
    ids = torch.randint(0, VOCAB, (2, 5))
    export_model(TinyEncoder().eval(), path,
                 inputs={"input_ids": ids, "attention_mask": torch.ones(2, 5, dtype=torch.long)},
                 dynamic_shapes={"input_ids": {0: "batch", 1: "seq"},
                                 "attention_mask": {0: "batch", 1: "seq"}})
    return str(path)


def fixed_timing(ratio: float, *, at: str | None = None):
    """A `time_on_grid` stand-in: the optimized model takes `ratio` times the input's time
    (at shape `at` only, 1.0 elsewhere, when given)."""

    def time_on_grid(original, optimized, feeds, rounds=1):
        run_ms = {shape: {"input": 1.0, "optimized": ratio if at in (None, shape) else 1.0}
                  for shape in feeds}
        return {"load_ms": {"input": 5.0, "optimized": 4.0}, "run_ms": run_ms}

    return time_on_grid


def run_cli(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr("sys.argv", ["attndeploy", *args])
    with pytest.raises(SystemExit) as info:
        cli_app.main()
    captured = capsys.readouterr()
    return info.value.code, captured.out, captured.err


def outputs(path, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, feed)


def test_an_export_model_file_is_optimized_checked_on_its_signature_and_written(
    generic_onnx, tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(optimize, "time_on_grid", fixed_timing(0.8))
    out = tmp_path / "o.onnx"
    code, stdout, stderr = run_cli(monkeypatch, capsys, "optimize", generic_onnx, "--out",
                                   str(out), "--json")
    assert code == 0, stderr
    report = json.loads(stdout)
    assert report["generic"] is True and report["faster"] is True
    # parity feeds from the signature: batch and seq dims take the grid's sizes
    assert [entry["shape"] for entry in report["parity"]] == ["1x1", "2x5", "3x17", "2x64"]
    assert all(set(entry["max_abs"]) == {"output"} for entry in report["parity"])
    assert list(report["timing"]["run_ms"]) == ["1x16", "1x32", "8x32", "8x128", "32x128"]
    assert report["timing"]["geomean_ratio"] == pytest.approx(0.8)
    feed = {"input_ids": np.arange(12).reshape(3, 4) % VOCAB,
            "attention_mask": np.ones((3, 4), np.int64)}
    np.testing.assert_allclose(outputs(out, feed)[0], outputs(generic_onnx, feed)[0],
                               atol=1e-5, rtol=1e-4)
    ran = {p.key: p.value for p in onnx.load(str(out)).metadata_props}
    assert json.loads(ran["attndeploy.optimized"])["num_heads"] == 0  # nothing to read it from


def test_a_slower_optimized_model_is_not_written(generic_onnx, tmp_path, monkeypatch):
    monkeypatch.setattr(optimize, "time_on_grid", fixed_timing(1.2))
    out = tmp_path / "o.onnx"
    with pytest.raises(ExportError, match=r"not faster .*1x16 1\.20x.*nothing written.*"
                                          r"--keep-slower"):
        optimize.optimize_model(generic_onnx, out)
    assert list(tmp_path.iterdir()) == []


def test_one_shape_much_slower_refuses_even_at_a_faster_mean(generic_onnx, tmp_path,
                                                             monkeypatch):
    monkeypatch.setattr(optimize, "time_on_grid", fixed_timing(1.1, at="1x16"))
    with pytest.raises(ExportError, match="not faster"):
        optimize.optimize_model(generic_onnx, tmp_path / "o.onnx")
    verdict = optimize.judge_speed({"a": {"input": 1.0, "optimized": 1.04},
                                    "b": {"input": 1.0, "optimized": 0.8}})
    assert verdict["faster"] is True  # within the slack at a, faster on the grid
    noise = optimize.judge_speed({"a": {"input": 1.0, "optimized": 0.995}})
    assert noise["faster"] is False  # within the timing's noise: not called faster


def test_the_fused_ops_domain_is_imported_so_that_shape_inference_reads_the_file():
    """The transformer optimizer adds `com.microsoft` to the imports only in its own save."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("BiasGelu", ["x", "b"], ["y"], domain="com.microsoft")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(onnx.shape_inference.InferenceError, match="com.microsoft"):
        onnx.shape_inference.infer_shapes(model, strict_mode=True)
    optimize._import_used_domains(model)
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 18),
                                                                    ("com.microsoft", 1)]
    onnx.shape_inference.infer_shapes(model, strict_mode=True)


def test_keep_slower_writes_the_slower_model_and_says_so(generic_onnx, tmp_path, monkeypatch,
                                                         capsys):
    monkeypatch.setattr(optimize, "time_on_grid", fixed_timing(1.2))
    out = tmp_path / "o.onnx"
    code, stdout, stderr = run_cli(monkeypatch, capsys, "optimize", generic_onnx, "--out",
                                   str(out), "--keep-slower")
    assert code == 0, stderr
    assert out.is_file() and "NOT faster" in " ".join(stdout.split())


def test_a_slower_model_fails_the_command_with_one_line(generic_onnx, tmp_path, monkeypatch,
                                                        capsys):
    monkeypatch.setattr(optimize, "time_on_grid", fixed_timing(1.2))
    code, _, stderr = run_cli(monkeypatch, capsys, "optimize", generic_onnx, "--out",
                              str(tmp_path / "o.onnx"))
    assert code == 1 and stderr.startswith("error (export):") and "not faster" in stderr
    assert list(tmp_path.iterdir()) == []


def test_an_optimized_model_that_differs_is_not_written_even_with_keep_slower(
    generic_onnx, tmp_path, monkeypatch
):
    changed = onnx.load(generic_onnx)
    # the projection's weight (D x D): the table's scale the LayerNorm would undo
    table = next(t for t in changed.graph.initializer if list(t.dims) == [D, D])
    values = onnx.numpy_helper.to_array(table) * 1.5
    table.CopyFrom(onnx.numpy_helper.from_array(values, table.name))
    monkeypatch.setattr(optimize, "_transformer_optimize", lambda *args: changed)
    monkeypatch.setattr(optimize, "time_on_grid", fixed_timing(0.5))
    out = tmp_path / "o.onnx"
    with pytest.raises(ExportError, match="optimized model's output: .* at shape 1x1.*"
                                          "nothing written"):
        optimize.optimize_model(generic_onnx, out, keep_slower=True)
    assert list(tmp_path.iterdir()) == []


def test_the_real_timing_runs_both_models_on_every_grid_shape(generic_onnx):
    model = onnx.load(generic_onnx)
    subject = optimize.read_subject(model, {}, generic_onnx)
    timing = optimize.time_on_grid(generic_onnx, model, subject.feeds(optimize.GRID), rounds=1)
    assert list(timing["run_ms"]) == ["1x16", "1x32", "8x32", "8x128", "32x128"]
    assert all(t["input"] > 0 and t["optimized"] > 0 for t in timing["run_ms"].values())
