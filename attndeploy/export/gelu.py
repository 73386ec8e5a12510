"""GELU (exact, erf form) written so that onnxruntime fuses it, for opsets without `Gelu`.

From opset 20 on, torch.onnx emits the standard `Gelu` op and onnxruntime fuses it with the
preceding bias into one `BiasGelu`. Below 20 it writes `x · (0.5 · (1 + erf(x / √2)))`, an
order onnxruntime's GELU fusion does not match, so every FFN runs five elementwise passes
instead of one. This translation writes the same value as `(x · (1 + erf(x / √2))) · 0.5`,
the order the fusion matches. Multiplying by 0.5 is exact in binary floating point, so both
orders give bit-identical results (below the subnormal range aside).
"""

from __future__ import annotations

from typing import Any

from onnxscript import ir
from onnxscript import opset18 as op

FUSED_GELU_FROM_OPSET = 20  # torch.onnx emits `Gelu` itself from here on


def aten_gelu(self: Any, approximate: str = "none") -> Any:
    """aten::gelu(Tensor self, *, str approximate='none'), traced by torch.onnx.

    The tanh form is left to torch.onnx's own translation.
    """
    if approximate != "none":
        from onnxscript.function_libs.torch_lib.ops.nn import aten_gelu as torchlib_gelu

        return torchlib_gelu(self, approximate=approximate)
    scaled = op.Div(self, ir.tensor(1.4142135623730951, dtype=self.dtype))
    one_plus_erf = op.Add(op.Erf(scaled), ir.tensor(1.0, dtype=self.dtype))
    return op.Mul(op.Mul(self, one_plus_erf), ir.tensor(0.5, dtype=self.dtype))


def translation_table(opset: int) -> dict[Any, Any]:
    """{aten.gelu: translation} below opset 20, else empty (torch.onnx's own `Gelu` is best)."""
    import torch

    if opset >= FUSED_GELU_FROM_OPSET:
        return {}
    return {torch.ops.aten.gelu.default: aten_gelu}
