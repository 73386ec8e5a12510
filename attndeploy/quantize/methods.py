"""int8 quantization of an exported model's main graph with onnxruntime.quantization.

Both methods quantize the MatMul and Gemm nodes whose second input is a weight (the Q/K/V,
output and feed-forward projections and the classifier: nearly all of a Transformer's
multiply-adds) to int8 weights, one scale per output channel by default. `dynamic` quantizes each
activation at run time (`DynamicQuantizeLinear` + `MatMulInteger`, which onnxruntime fuses into
one kernel); `static` writes QDQ pairs whose activation ranges were calibrated on example inputs
(`quantize_static`, MinMax). The `attndeploy` nodes and their functions are left as they are:
their bodies multiply activations by activations (Q·Kᵀ, P·V), which per-tensor int8 serves
worst, and their own small weights (QVI's per-head maps, EA's 3×3 convs) are a few percent of
the work (benchmarks/README.md, `quantize.py`). Every op written is standard ONNX (opset 10/13
quantization ops), which Triton's onnxruntime runs (1.19 in 24.10, 1.24 in 26.05).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from attndeploy.quantize.options import QuantizeOptions

OP_TYPES = ["MatMul", "Gemm"]


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """onnxruntime.quantization logs advice ("consider pre-processing") on the root logger."""
    logger = logging.getLogger()
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def quantize_dynamic_file(source: Path, target: Path, options: QuantizeOptions) -> None:
    """int8 weights, activations quantized at run time (no calibration data)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with _quiet():
        quantize_dynamic(
            str(source), str(target), weight_type=QuantType.QInt8,
            per_channel=options.per_channel, reduce_range=options.reduce_range,
            op_types_to_quantize=OP_TYPES, nodes_to_exclude=list(options.exclude),
            extra_options={"MatMulConstBOnly": True},
        )


class _Feeds:
    """onnxruntime's CalibrationDataReader over a list of feeds (one batch each)."""

    def __init__(self, feeds: Sequence[dict[str, np.ndarray]]) -> None:
        self._feeds = iter(feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._feeds, None)


def quantize_static_file(source: Path, target: Path, options: QuantizeOptions,
                         calibration: Sequence[dict[str, np.ndarray]]) -> None:
    """QDQ int8: activation ranges from running `calibration` (feeds of the model's inputs)."""
    from onnxruntime.quantization import (
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.calibrate import CalibrationDataReader

    reader = type("Reader", (_Feeds, CalibrationDataReader), {})(calibration)
    with _quiet():
        quantize_static(
            str(source), str(target), reader, quant_format=QuantFormat.QDQ,
            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
            per_channel=options.per_channel, reduce_range=options.reduce_range,
            op_types_to_quantize=OP_TYPES, nodes_to_exclude=list(options.exclude),
            calibrate_method=CalibrationMethod.MinMax,
            extra_options={"MatMulConstBOnly": True},
        )
