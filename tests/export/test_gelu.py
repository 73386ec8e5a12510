"""GELU below opset 20 (attndeploy/export/gelu.py): the same values as torch, in the order that
onnxruntime fuses into one kernel; from opset 20 on torch.onnx's own `Gelu` is kept."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn

from attndeploy.export import gelu

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")


class LinearGelu(nn.Module):
    def __init__(self, approximate: str) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 16)
        self.act = nn.GELU(approximate=approximate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.linear(x))


def export(module: nn.Module, path: Path, table: dict) -> Path:
    torch.onnx.export(
        module, (torch.randn(2, 3, 8),), str(path), dynamo=True, opset_version=18,
        custom_translation_table=table, dynamic_shapes=({0: "batch", 1: "seq"},),
        input_names=["x"], output_names=["y"], verbose=False, report=False,
    )
    return path


def optimized_op_types(path: Path, tmp_path: Path) -> set[str]:
    """Op types of the graph onnxruntime runs (basic + extended fusions, no hardware layouts)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return {node.op_type for node in onnx.load(options.optimized_model_filepath).graph.node}


def test_the_translation_applies_below_opset_20_only():
    assert set(gelu.translation_table(18)) == {torch.ops.aten.gelu.default}
    assert set(gelu.translation_table(19)) == {torch.ops.aten.gelu.default}
    assert gelu.translation_table(20) == {} and gelu.translation_table(23) == {}


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_exported_gelu_equals_torch(approximate: str, tmp_path: Path):
    torch.manual_seed(0)
    module = LinearGelu(approximate).eval()
    path = export(module, tmp_path / "gelu.onnx", gelu.translation_table(18))
    x = torch.randn(4, 7, 8) * 4  # both tails: erf saturates
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"x": x.numpy()})
    with torch.no_grad():
        want = module(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_the_erf_form_becomes_one_fused_kernel_in_onnxruntime(tmp_path: Path):
    torch.manual_seed(0)
    module = LinearGelu("none").eval()
    ours = export(module, tmp_path / "ours.onnx", gelu.translation_table(18))
    assert "Erf" not in optimized_op_types(ours, tmp_path)  # fused: Gelu or BiasGelu
    # The exporter's own opset-18 form stays five elementwise kernels: the reason for the module.
    stock = export(module, tmp_path / "stock.onnx", {})
    assert "Erf" in optimized_op_types(stock, tmp_path)
