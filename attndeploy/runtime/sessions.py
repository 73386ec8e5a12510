"""The one place an onnxruntime session is built: `create_session` and `session_options`.

Every stage that runs an ONNX file in-process (the export's runtime check, the optimizer and its
parity check, the validators' onnxruntime runner, `InferenceModel`, the benchmarks) states what it
needs (threads, graph optimization level, log level, providers) and gets the session from here, so
a setting such as "one inter-op thread when the intra-op count is fixed" is written once.

Errors of onnxruntime itself (a file it cannot load, a kernel it lacks) pass through unchanged:
each caller turns them into its own stage's error. onnxruntime and numpy only, never torch.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import onnxruntime as ort

from attndeploy.errors import ConfigError

CPU = "CPUExecutionProvider"
DEFAULT_PROVIDERS = (CPU,)
# Graph optimization levels by name, and by the numbers of onnxruntime's own tools
# (`-O 1/2/99` of the transformer optimizer, `optimize --ort-level`).
OPTIMIZATION_LEVELS = {
    "none": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    0: ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    1: ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    2: ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    99: ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
# onnxruntime's graph fusions that make our models slower on CPU, left out of every session made
# here. SkipLayerNormFusion (Add + LayerNormalization into one SkipLayerNormalization) costs
# 4-7 % at fp32 and 8-18 % at int8 on MiniLM over the shape grid, 1x16 to 8x128
# (benchmarks/ort_fusions.py). A file the transformer optimizer wrote with
# SkipLayerNormalization nodes keeps them: this only stops the session adding them.
SLOWER_FUSIONS = ("SkipLayerNormFusion",)
ERRORS_ONLY = 3  # log_severity_level: no graph-optimizer or float16 constant-folding warnings
FATAL_ONLY = 4  # a failing run is reported by the caller, not logged to stderr

ModelSource = str | os.PathLike[str] | bytes | Any  # Any: an onnx.ModelProto


def session_options(
    *,
    threads: int | None = None,
    optimization: str | int = "all",
    log_severity: int = ERRORS_ONLY,
    spinning: bool | None = None,
    optimized_model_path: str | os.PathLike[str] | None = None,
) -> ort.SessionOptions:
    """Session options: `threads` intra-op threads (then one inter-op thread; default
    onnxruntime's, one per core), a graph `optimization` level (`OPTIMIZATION_LEVELS`), a log
    level, `spinning` False to stop idle threads spin-waiting, and a path that receives the
    optimized graph."""
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or threads < 1):
        raise ConfigError(f"threads must be a positive integer, got {threads!r}")
    if optimization not in OPTIMIZATION_LEVELS:
        valid = ", ".join(str(key) for key in OPTIMIZATION_LEVELS)
        raise ConfigError(f"unknown onnxruntime optimization level {optimization!r}; "
                          f"valid: {valid}")
    options = ort.SessionOptions()
    options.log_severity_level = log_severity
    options.graph_optimization_level = OPTIMIZATION_LEVELS[optimization]
    if threads is not None:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    if spinning is not None:
        options.add_session_config_entry("session.intra_op.allow_spinning",
                                         "1" if spinning else "0")
    if optimized_model_path is not None:
        options.optimized_model_filepath = os.fspath(optimized_model_path)
    return options


def create_session(
    model: ModelSource,
    options: ort.SessionOptions | None = None,
    *,
    providers: Sequence[str | tuple[str, dict]] | None = None,
    disabled_fusions: Sequence[str] = SLOWER_FUSIONS,
    **settings: Any,
) -> ort.InferenceSession:
    """An onnxruntime session on `model` (a path, serialized bytes or an `onnx.ModelProto`) with
    `options`, or with `session_options(**settings)` when none are given; CPU unless `providers`
    says otherwise; onnxruntime's `disabled_fusions` left out (`SLOWER_FUSIONS`; () for every
    fusion, as the Triton server's onnxruntime runs a file)."""
    if options is not None and settings:
        raise ConfigError(f"give session options or settings ({', '.join(sorted(settings))}), "
                          "not both")
    if options is None:
        options = session_options(**settings)
    if hasattr(model, "SerializeToString"):
        source: str | bytes = model.SerializeToString()
    elif isinstance(model, bytes):
        source = model
    else:
        source = os.fspath(model)
    return ort.InferenceSession(source, options, providers=list(providers or DEFAULT_PROVIDERS),
                                disabled_optimizers=list(disabled_fusions))
