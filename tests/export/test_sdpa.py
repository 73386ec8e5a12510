"""`attndeploy.export.sdpa`: scaled dot-product attention with Kᵀ one Transpose and the scale one
Mul onnxruntime folds into its MatMul; the cases it does not take go to torch.onnx's own
translation, same values."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from attndeploy.export import export_model
from attndeploy.export.sdpa import attention_scale

pytestmark = pytest.mark.usefixtures("torch_defaults")

H, E = 2, 4


class Heads(nn.Module):
    """x [B, T, H·E] -> SDPA over H heads with the mask as `mask_kind` gives it."""

    def __init__(self, mask_kind: str = "float", causal: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.q, self.k, self.v = (nn.Linear(H * E, H * E) for _ in range(3))
        self.mask_kind, self.causal = mask_kind, causal

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        q, k, v = (self.heads(f(x)) for f in (self.q, self.k, self.v))  # [B, H, T, E] each
        real = mask.bool()[:, None, None, :]  # [B, 1, 1, T]
        if self.causal:
            attn_mask = None
        elif self.mask_kind == "bool":
            attn_mask = real
        else:
            attn_mask = torch.zeros(real.shape, dtype=x.dtype).masked_fill(~real, -1e9)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=self.causal)
        return y.transpose(1, 2).flatten(2)  # [B, T, H·E]

    @staticmethod
    def heads(x: Tensor) -> Tensor:
        return x.unflatten(-1, (H, E)).transpose(1, 2)  # [B, T, H·E] -> [B, H, T, E]


def export_and_run(model: nn.Module, tmp_path) -> tuple[onnx.ModelProto, np.ndarray, Tensor]:
    x, mask = torch.randn(2, 6, H * E), torch.ones(2, 6, dtype=torch.long)
    mask[1, 4:] = 0
    path = tmp_path / "m.onnx"
    export_model(model, path, inputs={"x": x[:, :5].clone(), "mask": mask[:, :5].clone()},
                 dynamic_shapes={"x": {0: "batch", 1: "seq"}, "mask": {0: "batch", 1: "seq"}})
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {"x": x.numpy(), "mask": mask.numpy()})[0]
    with torch.no_grad():
        want = model(x, mask)
    return onnx.load(str(path)), got, want


def test_a_float_mask_gets_one_transpose_of_k_and_the_scale_on_q(tmp_path):
    model, got, want = export_and_run(Heads("float").eval(), tmp_path)
    ops = [n.op_type for n in model.graph.node]
    perms = [list(n.attribute[0].ints) for n in model.graph.node if n.op_type == "Transpose"]
    assert [0, 2, 1] not in perms and "Slice" not in ops  # no shape subgraph around Kᵀ
    assert [0, 2, 3, 1] in perms  # Kᵀ: [B, T, H, E] -> [B, H, E, T] in one Transpose
    assert ops.count("Softmax") == 1 and "Sqrt" not in ops
    np.testing.assert_allclose(got, want.numpy(), atol=1e-5, rtol=1e-4)
    # onnxruntime folds the scale into one FusedMatMul; the Transposes stay as exported
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "opt.onnx")
    ort.InferenceSession(model.SerializeToString(), options,
                         providers=["CPUExecutionProvider"])
    optimized = [n.op_type for n in onnx.load(str(tmp_path / "opt.onnx")).graph.node]
    assert optimized.count("FusedMatMul") == 1 and "Mul" not in optimized
    assert optimized.count("Transpose") == len(perms)


@pytest.mark.parametrize("kind, causal", [("bool", False), ("float", True)])
def test_the_cases_it_does_not_take_keep_torch_onnx_translation(tmp_path, kind, causal):
    model, got, want = export_and_run(Heads(kind, causal).eval(), tmp_path)
    assert any(n.op_type == "Softmax" for n in model.graph.node)
    np.testing.assert_allclose(got, want.numpy(), atol=1e-5, rtol=1e-4)


def test_the_scale_is_computed_in_the_query_dtype():
    assert attention_scale(64, None, np.dtype(np.float32)) == np.float32(0.125)
    assert attention_scale(3, None, np.dtype(np.float16)).dtype == np.float16
    assert attention_scale(3, 0.5, np.dtype(np.float32)) == np.float32(0.5)
