"""Where a model diverges: layer-by-layer comparison, down inside the `attndeploy` functions.

    from attndeploy.debug import compare_checkpoint, compare_models, compare_module

`compare_checkpoint(ckpt, onnx)`, `compare_module(model, onnx, feeds)` (PyTorch against its
export) and `compare_models(reference_onnx, candidate_onnx, feeds)` (two ONNX files, e.g. fp32
against int8) return a `DebugReport`: every `attndeploy` node, block and output compared on the
same inputs, the first divergence, what the first diverging node's function shows inside, and
`ranked()` layers. See `attndeploy.debug.compare` for what is compared and how.

Modules, one job each: `graph` (where the layers are in an exported graph), `capture` (the
PyTorch side of one forward pass), `expose` (onnxruntime with intermediates as outputs),
`sources` (the files and the inputs), `families` (a family's own inputs: an image model's
images), `options`, `engine` (statistics collected per layer),
`session` (one comparison in progress), `inside` (the look inside one node's function),
`compare` (the entry points), `report` and `plot` (the result as data, JSON and PNG).
"""

from __future__ import annotations

from attndeploy.debug.compare import compare_checkpoint, compare_models, compare_module
from attndeploy.debug.options import DebugOptions
from attndeploy.debug.report import BodyStep, DebugReport, InsideResult, LayerResult
from attndeploy.debug.sources import (
    DEFAULT_SHAPE,
    checkpoint_feeds,
    metadata_feeds,
    token_feeds,
)

__all__ = [
    "DEFAULT_SHAPE",
    "BodyStep",
    "DebugOptions",
    "DebugReport",
    "InsideResult",
    "LayerResult",
    "checkpoint_feeds",
    "compare_checkpoint",
    "compare_models",
    "compare_module",
    "metadata_feeds",
    "token_feeds",
]
