"""`optimize_model`: any ONNX model -> an onnxruntime-optimized copy, checked equal and faster.

    result = optimize_model("model.onnx", "model.opt.onnx")      # method "transformers"
    result.fused            # {"com.microsoft::SkipLayerNormalization": 4, ...}

Two methods (`Method`), each a step users take before serving with onnxruntime:

- `transformers` (default): onnxruntime's transformer optimizer, what Optimum's `ORTOptimizer`
  runs: `onnxruntime.transformers.optimizer.optimize_model(path, model_type="bert", num_heads,
  hidden_size, opt_level)`, heads and hidden size from the model's config metadata (0, "detect",
  for a BiLSTM backbone). Its Python fusions turn LayerNormalization, residual Add +
  LayerNormalization, Gelu and bias + Gelu (and Attention, where it finds BERT's pattern: never
  in an `attndeploy` layer) into `com.microsoft` ops, which only onnxruntime runs (Triton's
  onnxruntime backend included). `opt_level` 0 (the default here) runs the fusions alone and
  keeps every `attndeploy` node with its function; 1 (the optimizer's default for "bert") first
  runs onnxruntime's basic optimizations, which inline the functions and, for a float16 model,
  add the Casts of onnxruntime's CPU provider; 2 and 99 add onnxruntime's extended/all levels.
- `onnxruntime`: onnxruntime's own optimized graph (`SessionOptions.optimized_model_filepath`,
  what Triton's onnxruntime backend can cache), at `opt_level` 1 (basic, provider-independent;
  the default for this method), 2 (extended: CPU provider fusions) or 99 (all: adds a layout
  for this machine's CPU; use the file only where it was made). onnxruntime then skips those
  passes when it loads the file: a faster load, the same run.

Any ONNX model: an `attndeploy export`ed checkpoint (its metadata names the vocabulary, max_seq
and family: the feeds are `attndeploy.validate.grid`'s, padded batches included, and the outputs
are compared as `validate` compares them, GA-Net's gates exactly), or an `export_model` file, a
plain `torch.onnx.export` or any other ONNX file: feeds are random tensors made from the graph's
input signature (`attndeploy.optimize_feeds`: dims from the metadata's bounds, integer ids
bounded by the embedding table they index) and every output is compared, floats within the
dtype's default tolerance, others exactly.

Nothing is written unless (1) the optimized model gives the input model's outputs on a few feeds
(`attndeploy.optimize_parity`) in onnxruntime, and (2) it is faster on the shape grid
(`attndeploy.optimize_speed`'s `GRID`, issue #55's
1x16 ... 32x128, seq clipped to the model's limit): both models timed interleaved in onnxruntime's
CPU provider, one thread, CPU time of the calling thread (`time_on_grid`), and judged by
`judge_speed` (geometric mean of the time ratios at most 0.99, no shape more than 5 % slower).
`keep_slower=True` (`--keep-slower`) writes a model that passed (1) but not (2). The file is
written atomically; its metadata is the input's plus `attndeploy.optimized` (what ran, as JSON).
The result counts op types before and after (`fused`: the non-standard types that are new or
more frequent) and carries the timing (`timing`: load, per-shape run times, ratios, verdict).
Measured on 2 CPU cores (benchmarks/latency.py's evolving model): the transformer optimizer's
fusions made runs on the CPU provider 7-13 % slower (onnxruntime fuses LayerNormalization and
Gelu itself when it loads a model; what the optimizer's fused ops give on a GPU was not
measured), which is why a slower result is no longer written by default; onnxruntime's saved
graph loaded in 49 ms (basic) and 34 ms (extended) instead of 103 ms and ran as fast: its gain
is the load, which the grid does not judge, so that method's file needs `--keep-slower`.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import onnx

from attndeploy import __version__
from attndeploy.errors import ExportError
from attndeploy.fsutil import atomic_write_bytes, check_not_an_input, check_output_file
from attndeploy.optimize_methods import DEFAULT_METHOD, METHODS
from attndeploy.optimize_parity import check_parity, first_line, read_subject
from attndeploy.optimize_speed import (
    GRID,
    TIMING_ROUNDS,
    judge_speed,
    speed_summary,
    time_on_grid,
)
from attndeploy.runtime.metadata import ModelMetadata
from attndeploy.runtime.names import (
    DOMAIN,
    META_INLINED,
    META_OPTIMIZED,
    PRODUCER,
)

Method = Enum("Method", {name: name for name in METHODS}, type=str)  # type: ignore[misc]


OPT_LEVELS = {Method.transformers: (0, 1, 2, 99), Method.onnxruntime: (1, 2, 99)}
DEFAULT_OPT_LEVELS = {Method.transformers: 0, Method.onnxruntime: 1}
MODEL_TYPE = "bert"


@dataclass
class OptimizeResult:
    """What `optimize_model` did (module docstring)."""

    path: Path
    source: Path
    method: Method
    opt_level: int
    ops_before: dict[str, int]
    ops_after: dict[str, int]
    parity: list[dict[str, Any]]  # one entry per feed shape: max abs error per output
    timing: dict[str, Any]  # time_on_grid's + judge_speed's: load_ms, run_ms, ratio, faster
    seconds: float
    num_heads: int = 0  # transformers method: what the attention fusion was told
    hidden_size: int = 0
    messages: list[str] = field(default_factory=list)  # what the optimizer logged or printed
    generic: bool = False  # not a checkpoint's export: feeds from the input signature

    @property
    def fused(self) -> dict[str, int]:
        """Op types outside the standard and `attndeploy` domains that are new or more
        frequent, with their count after."""
        return {
            op: n for op, n in self.ops_after.items()
            if "::" in op and not op.startswith(DOMAIN + "::") and n > self.ops_before.get(op, 0)
        }

    @property
    def inlined(self) -> bool:
        """Whether the input's `attndeploy` nodes were inlined."""
        before = sum(n for op, n in self.ops_before.items() if op.startswith(DOMAIN + "::"))
        after = sum(n for op, n in self.ops_after.items() if op.startswith(DOMAIN + "::"))
        return before > 0 and after == 0

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "source": str(self.source),
            "method": self.method.value,
            "opt_level": self.opt_level,
            "num_heads": self.num_heads,
            "hidden_size": self.hidden_size,
            "nodes_before": sum(self.ops_before.values()),
            "nodes_after": sum(self.ops_after.values()),
            "fused": self.fused,
            "inlined": self.inlined,
            "ops_before": self.ops_before,
            "ops_after": self.ops_after,
            "parity": self.parity,
            "timing": self.timing,
            "generic": self.generic,
            "faster": bool(self.timing.get("faster")),
            "seconds": round(self.seconds, 3),
            "messages": self.messages,
        }


def op_counts(model: onnx.ModelProto) -> dict[str, int]:
    """Main-graph nodes by op type; types outside the default domain as `domain::Type`."""
    counts = Counter(
        n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}"
        for n in model.graph.node
    )
    return dict(sorted(counts.items()))


def attention_shape(meta: ModelMetadata) -> tuple[int, int]:
    """(num_heads, hidden_size) for the optimizer's attention fusion; (0, 0) lets it detect
    them (a BiLSTM backbone has no multi-head attention)."""
    config = meta.config
    if config.get("family", "transformer") != "transformer":
        return 0, 0
    heads, hidden = config.get("n_heads"), config.get("d_model")
    if not (isinstance(heads, int) and isinstance(hidden, int)):
        return 0, 0
    return heads, hidden


# ----------------------------------------------------------------------------- methods


@contextlib.contextmanager
def _collect_optimizer_output(messages: list[str]) -> Iterator[None]:
    """The transformer optimizer logs through top-level loggers ("optimizer", "onnx_model",
    "fusion_*"), prints to stdout (e.g. "failed in shape inference") and, at opt_level >= 1,
    runs an onnxruntime session that logs to stderr: collect the first two, quiet the third
    (onnxruntime's default logger back to its default, warnings, afterwards)."""
    import onnxruntime as ort

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(f"{record.levelname.lower()}: {record.getMessage()}")

    handler = _Collect(logging.WARNING)
    root = logging.getLogger()
    root.addHandler(handler)
    printed = io.StringIO()
    ort.set_default_logger_severity(3)
    try:
        with contextlib.redirect_stdout(printed):
            yield
    finally:
        ort.set_default_logger_severity(2)
        root.removeHandler(handler)
        messages.extend(line.strip() for line in printed.getvalue().splitlines() if line.strip())


def _transformer_optimize(
    source: Path, opt_level: int, num_heads: int, hidden_size: int, messages: list[str]
) -> onnx.ModelProto:
    try:
        from onnxruntime.transformers import optimizer
    except ImportError as exc:
        raise ExportError(f"onnxruntime's transformer optimizer cannot be imported: {exc}") \
            from exc
    with _collect_optimizer_output(messages):
        try:
            optimized = optimizer.optimize_model(
                str(source), model_type=MODEL_TYPE, num_heads=num_heads,
                hidden_size=hidden_size, opt_level=opt_level, use_gpu=False,
            )
        except Exception as exc:  # onnxruntime and the fusions raise many types
            raise ExportError(f"onnxruntime's transformer optimizer failed on {source}: "
                              f"{first_line(exc)}") from exc
    _import_used_domains(optimized.model)
    return optimized.model


def _import_used_domains(model: onnx.ModelProto) -> None:
    """Opset imports for the domains the fusions' nodes use (`com.microsoft`, version 1): the
    optimizer adds them only in its own `save`, and without them onnx's shape inference (which
    `quantize` runs) refuses the file."""
    imported = {o.domain for o in model.opset_import}
    used = {n.domain for n in model.graph.node} - imported - {"", "ai.onnx"}
    for domain in sorted(used):
        model.opset_import.append(onnx.helper.make_opsetid(domain, 1))


ORT_LEVELS = {1: "ORT_ENABLE_BASIC", 2: "ORT_ENABLE_EXTENDED", 99: "ORT_ENABLE_ALL"}


def save_ort_optimized(source: Path, target: Path, opt_level: int) -> None:
    """onnxruntime's CPU provider optimizes `source` at `opt_level` and saves the graph."""
    from attndeploy.runtime.sessions import create_session

    try:  # errors-only logging: "hardware specific" notices at level 99, fp16 folding
        create_session(source, optimization=opt_level, optimized_model_path=target)
    except Exception as exc:  # onnxruntime raises its own pybind types
        raise ExportError(f"onnxruntime cannot optimize {source}: {first_line(exc)}") from exc


def _ort_optimize(source: Path, opt_level: int) -> onnx.ModelProto:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="attndeploy-optimize-") as folder:
        saved = Path(folder) / "optimized.onnx"
        save_ort_optimized(source, saved, opt_level)
        return onnx.load(str(saved))


# ----------------------------------------------------------------------------- entry point


def optimize_model(
    model_path: Path | str,
    out_path: Path | str,
    *,
    method: Method | str = DEFAULT_METHOD,
    opt_level: int | None = None,
    keep_slower: bool = False,
    rounds: int = TIMING_ROUNDS,
) -> OptimizeResult:
    """Optimize any ONNX model (module docstring): a checkpoint's export, an `export_model`
    file or any other. Written to `out_path` atomically only when it gives the input's outputs
    and, unless `keep_slower`, runs faster on the shape grid (`judge_speed`); ExportError
    saying which, with nothing written, otherwise."""
    started = time.perf_counter()
    source, target = Path(model_path), Path(out_path)
    try:
        method = Method(method)
    except ValueError:
        valid = ", ".join(m.value for m in Method)
        raise ExportError(f"unknown optimization method {method!r}; valid: {valid}") from None
    opt_level = DEFAULT_OPT_LEVELS[method] if opt_level is None else opt_level
    if opt_level not in OPT_LEVELS[method]:
        levels = ", ".join(map(str, OPT_LEVELS[method]))
        raise ExportError(f"--opt-level {opt_level} is not one of {levels} (method {method.value})")
    if rounds < 1:
        raise ExportError(f"timing rounds must be >= 1, got {rounds}")
    check_output_file(target)
    check_not_an_input(target, [source])
    if not source.is_file():
        raise ExportError(f"{source} is not a file; give an ONNX model")
    try:
        original = onnx.load(str(source))
    except Exception as exc:  # protobuf raises DecodeError and friends
        raise ExportError(f"cannot read {source} as an ONNX model: {first_line(exc)}") from exc
    metadata = {p.key: p.value for p in original.metadata_props}
    subject = read_subject(original, metadata, source)
    messages: list[str] = []
    num_heads = hidden_size = 0
    if method is Method.transformers:
        if subject.meta is not None:
            num_heads, hidden_size = attention_shape(subject.meta)
        optimized = _transformer_optimize(source, opt_level, num_heads, hidden_size, messages)
        ran = {"tool": "onnxruntime.transformers.optimizer.optimize_model",
               "model_type": MODEL_TYPE, "num_heads": num_heads, "hidden_size": hidden_size}
    else:
        optimized = _ort_optimize(source, opt_level)
        ran = {"tool": "onnxruntime.SessionOptions.optimized_model_filepath",
               "graph_optimization_level": ORT_LEVELS[opt_level],
               "provider": "CPUExecutionProvider"}
    inlined = _has_custom_nodes(original) and not _has_custom_nodes(optimized)
    _set_metadata(optimized, metadata, {**ran, "opt_level": opt_level,
                                        "onnxruntime": _ort_version()}, inlined=inlined)
    parity = check_parity(source, optimized, subject)
    timing = time_on_grid(source, optimized, subject.feeds(GRID), rounds)
    speed = judge_speed(timing["run_ms"])
    timing = {**timing, **speed, "threads": 1, "rounds": rounds}
    if not speed["faster"] and not keep_slower:
        raise ExportError(f"the optimized model is not faster than {source.name} on the shape "
                          f"grid ({speed_summary(speed)}); nothing written. --keep-slower "
                          f"writes it anyway")
    atomic_write_bytes(target, optimized.SerializeToString())
    return OptimizeResult(
        target, source, method, opt_level, op_counts(original), op_counts(optimized), parity,
        timing, time.perf_counter() - started, num_heads, hidden_size,
        list(dict.fromkeys(messages)), generic=subject.generic,
    )


def _ort_version() -> str:
    import onnxruntime as ort

    return ort.__version__


def _has_custom_nodes(model: onnx.ModelProto) -> bool:
    return any(n.domain == DOMAIN for n in model.graph.node)


def _set_metadata(
    model: onnx.ModelProto, metadata: dict[str, str], optimized: dict[str, Any], *,
    inlined: bool,
) -> None:
    """The input's metadata plus `attndeploy.optimized`; `inlined` "true" when the
    optimization inlined the `attndeploy` functions."""
    values = dict(metadata)
    values[META_OPTIMIZED] = json.dumps(optimized, sort_keys=True)
    if inlined:
        values[META_INLINED] = "true"
    del model.metadata_props[:]
    for key, value in values.items():
        model.metadata_props.append(onnx.StringStringEntryProto(key=key, value=value))
    model.producer_name, model.producer_version = PRODUCER, __version__
