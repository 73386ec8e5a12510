"""`attndeploy quantize`: an exported model to int8, checked against its fp32 self before it is
written.

    from attndeploy.quantize import QuantizeOptions, quantize_model
    result = quantize_model("model.onnx", "int8.onnx", QuantizeOptions(), data="held_out.jsonl")

Modules: `options` (what to quantize and the tolerances), `methods` (onnxruntime.quantization's
dynamic and static QDQ quantization on the main graph; the `attndeploy` nodes keep their
functions), `check` (fp32 against int8: the largest logit change on a shape grid, label agreement
and held-out accuracy on labelled texts), `quantizer` (`quantize_model`: quantize, check, write
only within the tolerances), `decoder` (a text-generation export: the same int8 graph, judged by
greedy-token agreement and teacher-forced perplexity), `dispatch` (`quantize_model`: the one or
the other by the model's metadata), `cpu` (whether this CPU has VNNI, which 8-bit kernels want).
"""

from __future__ import annotations

from typing import Any

from attndeploy.quantize.options import QuantizeOptions

__all__ = ["QuantizeOptions", "QuantizeResult", "quantize_model"]


def __getattr__(name: str) -> Any:
    """The quantizer on first use: the CLI reads the options' defaults at start, without onnx."""
    if name == "QuantizeResult":
        from attndeploy.quantize import quantizer

        return quantizer.QuantizeResult
    if name == "quantize_model":
        from attndeploy.quantize import dispatch

        return dispatch.quantize_model
    raise AttributeError(f"module 'attndeploy.quantize' has no attribute {name!r}")
