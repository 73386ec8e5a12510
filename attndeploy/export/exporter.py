"""Checkpoint -> ONNX: every attention layer one `attndeploy` node with a model-local function.

Route (architecture.md, "Export: facts established"): while torch.export traces the model, the
attention modules call torch custom ops (`dispatch.override_ops`) and every LSTM direction run
calls `attndeploy_std::lstm` (`attndeploy.export.lstm`); the translation table turns each
attention op into an opaque node of domain `attndeploy` and each LSTM run into one standard ONNX
`LSTM` node. The onnxscript bodies are appended afterwards as FunctionProtos, because the
exporter inlines every function it records itself (microsoft/onnxscript#2813,
pytorch/pytorch#154319).

Stages (timed in `ExportResult.stages`):
  load           read the checkpoint (eval mode; fp16 when asked)
  registry       torch.onnx's op registry plus our translations, built once per process/opset
  capture        `torch.export.export`, non-strict, batch and seq dynamic. Called directly, not
                 through `torch.onnx.export(model, ...)`, whose fallback strategies re-export
                 with torch's "suggested fixes" and silently pin a dynamic dim (architecture.md).
  translate      decomposition, ONNX translation, onnxscript optimizer (`_to_onnx`); then the
                 dims get the interface's names and the `Attention` masks their query dim
  finish         function bodies, structure checks (`check_structure`), metadata, onnx.checker
  runtime_check  one run in onnxruntime's CPU provider; then the atomic write
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.inliner
import onnx.numpy_helper
import torch
from torch import nn

from attndeploy import __version__
from attndeploy.checkpoint import Checkpoint, read_checkpoint
from attndeploy.errors import ExportError
from attndeploy.export import gelu, lstm
from attndeploy.export._registry import (
    DEFAULT_OPSET,
    SUPPORTED_OPSETS,
    custom_translation_table,
    export_op_table,
    function_protos,
)
from attndeploy.export.ops._common import DOMAIN, DOMAIN_VERSION
from attndeploy.fsutil import atomic_write_bytes
from attndeploy.serving.interface import BATCH, SEQ, ModelInterface, make_feed, model_interface
from attndeploy.variants import dispatch
from attndeploy.variants._recurrent import override_lstm

META_PREFIX = "attndeploy."
# Ops each variant's attention layers become, and the pooling op of gated classifiers.
LAYER_OPS = {
    "standard": None,
    "qvi": {"pooled": "QVIAttention", "pairwise": "QVIPairwiseAttention"},
    "ganet": "GatedAttention",
    "evolving": ("EvolvingAttentionStart", "EvolvingAttention"),
}
# G11: an exported graph is deterministic; none of these may appear, in the graph or a function.
RANDOM_OPS = frozenset({
    "RandomUniform", "RandomUniformLike", "RandomNormal", "RandomNormalLike",
    "Bernoulli", "Multinomial",
})
# Largest batch the traced graph is declared for (ONNX dims carry no bound; torch.export needs one).
MAX_BATCH = 4096
EXAMPLE_BATCH, EXAMPLE_SEQ = 2, 8


@dataclass(frozen=True)
class ExportOptions:
    opset: int = DEFAULT_OPSET
    fp16: bool = False
    inline_functions: bool = False
    max_seq: int | None = None  # largest seq the graph accepts; default the model's max_seq

    def __post_init__(self) -> None:
        if self.opset not in SUPPORTED_OPSETS:
            raise ExportError(
                f"opset {self.opset} is not supported; choose one of "
                f"{SUPPORTED_OPSETS.start}..{SUPPORTED_OPSETS.stop - 1}"
            )
        if self.max_seq is not None and self.max_seq < 2:
            raise ExportError(f"--max-seq must be >= 2, got {self.max_seq}")


@dataclass
class ExportResult:
    path: Path
    seconds: float
    custom_nodes: dict[str, int]
    metadata: dict[str, str]
    options: ExportOptions
    stages: dict[str, float] = field(default_factory=dict)
    cpu_seconds: float = 0.0  # this process's CPU time (less sensitive to a busy machine)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "seconds": round(self.seconds, 3),
            "cpu_seconds": round(self.cpu_seconds, 3),
            "stages": {k: round(v, 3) for k, v in self.stages.items()},
            "custom_nodes": self.custom_nodes,
            "opset": self.options.opset,
            "fp16": self.options.fp16,
            "inline_functions": self.options.inline_functions,
            "max_seq": int(self.metadata.get(META_PREFIX + "max_seq", 0)) or None,
            "variant": self.metadata.get(META_PREFIX + "variant"),
        }


def interface_of(config: Any) -> ModelInterface:
    """The model-level interface (ops.md) of a model with this config."""
    return model_interface(
        head=config.head, num_labels=config.num_labels, gated=config.variant == "ganet"
    )


class _InterfaceWrapper(nn.Module):
    """The model-level interface as a plain tuple: (logits[, gates]); fp16 logits cast to fp32.

    Also holds the export-only state: the ONNX-layout weights of the model's LSTMs (if any).
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.output_names = interface_of(model.config).output_names
        self.lstm_weights = lstm.LSTMWeights(model)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple:
        outputs = self.model(input_ids, attention_mask)
        outputs["logits"] = outputs["logits"].float()
        return tuple(outputs[name] for name in self.output_names)

    @contextmanager
    def export_routes(self) -> Iterator[None]:
        """Attention ops as `attndeploy` custom ops, LSTM runs as `attndeploy_std::lstm`."""
        with ExitStack() as stack:
            stack.enter_context(dispatch.override_ops(export_op_table()))
            if len(self.lstm_weights):
                stack.enter_context(override_lstm(self.lstm_weights.run))
            yield


def translation_table(opset: int) -> dict[Any, Any]:
    """Every torch op the exporter translates itself: the `attndeploy` ops, the LSTM, and GELU
    below opset 20 (in the order onnxruntime fuses, `attndeploy.export.gelu`)."""
    return {
        **custom_translation_table(), **lstm.custom_translation_table(),
        **gelu.translation_table(opset),
    }


# ----------------------------------------------------------------------------- contract


def expected_custom_nodes(config: Any) -> Counter:
    """How many nodes of each `attndeploy` op type the exported graph must hold."""
    expected: Counter = Counter()
    layers = LAYER_OPS[config.variant]
    if config.family == "transformer" and layers is not None:
        if config.variant == "qvi":
            expected[layers[config.qvi.form]] = config.n_layers
        elif config.variant == "evolving":
            expected[layers[0]] = 1
            if config.n_layers > 1:
                expected[layers[1]] = config.n_layers - 1
        else:
            expected[layers] = config.n_layers
    if config.variant == "ganet" and config.head == "classification":
        expected["GatedAttentionPooling"] = 1
    return expected


def expected_lstm_nodes(config: Any) -> int:
    """Standard `LSTM` nodes: one per direction and layer of every PaddedBiLSTM."""
    runs = 2 * 2 if config.family == "bilstm" else 0  # backbone: 2 layers x 2 directions
    if config.variant == "ganet" and config.ganet.aux == "bilstm":
        runs += 2  # gate network: 1 layer x 2 directions
    return runs


def _dims(value_info: onnx.ValueInfoProto) -> list[str | int]:
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


def random_ops(model: onnx.ModelProto) -> list[str]:
    """Random op types in the graph or any function body (G11: must be empty)."""
    nodes = [*model.graph.node, *(n for f in model.functions for n in f.node)]
    return sorted({n.op_type for n in nodes if n.domain in ("", "ai.onnx")} & RANDOM_OPS)


def check_structure(model: onnx.ModelProto, config: Any, *, inlined: bool) -> dict[str, int]:
    """Assert the contract: custom nodes per layer, a function per op type, one `LSTM` per
    direction run, no random op, symbolic dims. Returns the custom node counts."""
    found = Counter(n.op_type for n in model.graph.node if n.domain == DOMAIN)
    expected = Counter() if inlined else expected_custom_nodes(config)
    if found != expected:
        raise ExportError(
            f"the exported graph holds {dict(found)} {DOMAIN} nodes, expected {dict(expected)}"
        )
    functions = {(f.domain, f.name) for f in model.functions}
    missing = sorted(op for op in found if (DOMAIN, op) not in functions)
    if missing:
        raise ExportError(f"custom op(s) without a function body: {', '.join(missing)}")
    lstms = sum(n.op_type == "LSTM" and n.domain in ("", "ai.onnx") for n in model.graph.node)
    if lstms != expected_lstm_nodes(config):
        raise ExportError(
            f"the exported graph holds {lstms} LSTM nodes, expected {expected_lstm_nodes(config)}"
            " (one per direction and layer)"
        )
    randoms = random_ops(model)
    if randoms:
        raise ExportError(f"the exported graph holds random ops {randoms}; export must be "
                          "deterministic (eval mode, GA-Net gate_mode 'threshold')")
    interface = interface_of(config)
    for value in list(model.graph.input) + list(model.graph.output):
        spec = interface.spec(value.name)
        dims = _dims(value)
        for axis, want in enumerate(spec.dims):
            got = dims[axis] if axis < len(dims) else None
            if got != want:
                raise ExportError(
                    f"{value.name}: dimension {axis} is {got!r}, expected {want!r}"
                    + (" (the exporter pinned a dynamic dim)" if isinstance(want, str) else "")
                )
    return dict(found)


def build_metadata(ckpt: Checkpoint, options: ExportOptions, max_seq: int) -> dict[str, str]:
    config = ckpt.model_config
    return {
        META_PREFIX + "variant": config.variant,
        META_PREFIX + "family": config.family,
        META_PREFIX + "head": config.head,
        META_PREFIX + "version": __version__,
        META_PREFIX + "config": json.dumps(config.to_dict(), sort_keys=True),
        META_PREFIX + "weights_sha256": ckpt.weights_sha256,
        META_PREFIX + "opset": str(options.opset),
        META_PREFIX + "domain_version": str(DOMAIN_VERSION),
        META_PREFIX + "labels": json.dumps(list(ckpt.label_names)),
        META_PREFIX + "max_seq": str(max_seq),
        META_PREFIX + "dtype": "float16" if options.fp16 else "float32",
        META_PREFIX + "inlined": "true" if options.inline_functions else "false",
        META_PREFIX + "tokenizer": json.dumps(ckpt.tokenizer.to_dict()) if ckpt.tokenizer else "",
    }


# ----------------------------------------------------------------------------- tracing


@contextmanager
def _tracing_settings() -> Iterator[None]:
    """Quiet and faster tracing, restored on exit.

    - torch.export / torch.onnx warn at WARNING level (e.g. about torchvision ops that are not
      installed); the exporter reports its own errors.
    - FakeTensor's dispatch cache is switched off: with dynamic batch and seq every cache hit
      rebuilds the output's symbolic sizes and strides, which costs more than re-running the
      meta function (measured on torch 2.13: about 0.6 s less CPU per export of ~5 s).
    - torch's structured trace log (`torch.__trace`) is detached unless TORCH_TRACE asks for it:
      torch builds every trace payload (graph dumps as JSON) whenever that logger has a handler,
      and frameworks that attach handlers to all loggers (pytest's log capture does) made
      export twice as slow.
    """
    torch_logger = logging.getLogger("torch")
    level = torch_logger.level
    torch_logger.setLevel(logging.ERROR)
    trace_logger = logging.getLogger("torch.__trace")
    trace_handlers = [] if os.environ.get("TORCH_TRACE") else list(trace_logger.handlers)
    for handler in trace_handlers:
        trace_logger.removeHandler(handler)
    try:
        with ExitStack() as stack:
            stack.enter_context(warnings.catch_warnings())
            warnings.simplefilter("ignore")
            dynamo_config = torch._dynamo.config
            if hasattr(dynamo_config, "fake_tensor_cache_enabled"):
                stack.enter_context(dynamo_config.patch(fake_tensor_cache_enabled=False))
            yield
    finally:
        torch_logger.setLevel(level)
        for handler in trace_handlers:
            trace_logger.addHandler(handler)


def _capture(wrapper: _InterfaceWrapper, max_seq: int) -> torch.export.ExportedProgram:
    """torch.export the wrapper with batch and seq dynamic; a pinned dim is an error."""
    example_seq = min(EXAMPLE_SEQ, max_seq)
    vocab = wrapper.model.config.vocab_size
    example = (
        torch.randint(min(2, vocab - 1), vocab, (EXAMPLE_BATCH, example_seq)),
        torch.ones(EXAMPLE_BATCH, example_seq, dtype=torch.long),
    )
    batch = torch.export.Dim(BATCH, min=1, max=MAX_BATCH)
    seq = torch.export.Dim(SEQ, min=1, max=max_seq)
    dims = {0: batch, 1: seq}
    with wrapper.export_routes():
        try:
            return torch.export.export(
                wrapper, example, dynamic_shapes={"input_ids": dims, "attention_mask": dims},
                strict=False,
            )
        except Exception as exc:  # torch.export raises many types; keep its message
            raise ExportError(f"torch.export failed: {_first_lines(exc)}") from exc


def _first_lines(exc: BaseException, limit: int = 25) -> str:
    lines = str(exc).strip().splitlines()
    return "\n".join(lines[:limit] + (["..."] if len(lines) > limit else []))


@functools.cache
def _onnx_registry(opset: int) -> Any | None:
    """torch.onnx's op registry for `opset` plus our translations, built once per process.

    `torch.onnx.export` rebuilds it on every call: 1.5-2.5 s of re-parsing torchlib sources
    (onnxscript's `TracedOnnxFunction.function_ir` is not cached), a third of a small model's
    export. It is only read while exporting. None when this torch lacks the internal exporter
    API (`_core.export` with a `registry`, torch 2.6-2.13): then `_to_onnx` takes the public
    route, which is only slower.
    """
    try:
        from torch.onnx._internal.exporter import _core, _registration
    except ImportError:
        return None
    if not hasattr(_core, "export") or not hasattr(_registration, "ONNXRegistry"):
        return None
    registry = _registration.ONNXRegistry.from_torchlib(opset_version=opset)
    for torch_op, translate in translation_table(opset).items():
        registry.register_op(torch_op, translate, is_complex=False)
    return registry


def _to_onnx(program: torch.export.ExportedProgram, opset: int, names: ModelInterface) -> Any:
    """ExportedProgram -> torch.onnx.ONNXProgram: decompose, translate, optimize."""
    kwargs: dict[str, Any] = {
        "input_names": names.input_names, "output_names": names.output_names,
        "opset_version": opset, "optimize": True, "verify": False, "report": False,
        "verbose": False,
    }
    registry = _onnx_registry(opset)
    if registry is not None:
        from torch.onnx._internal.exporter import _core

        return _core.export(program, registry=registry, **kwargs)
    return torch.onnx.export(
        program, (), dynamo=True, custom_translation_table=translation_table(opset), **kwargs
    )


def _name_dynamic_dims(model: onnx.ModelProto, interface: ModelInterface) -> None:
    """Rename torch's dim symbols (`s43`, ...) to the interface's names (`batch`, `seq`)."""
    (first,) = [v for v in model.graph.input if v.name == interface.input_names[0]]
    names = {
        old: new
        for old, new in zip(_dims(first), interface.inputs[0].dims, strict=False)
        if isinstance(old, str) and isinstance(new, str) and old != new
    }
    if not names:
        return
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
    values = [*model.graph.input, *model.graph.output, *model.graph.value_info]
    for value in values:
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param:
                dim.dim_param = pattern.sub(lambda m: names[m.group(1)], dim.dim_param)


def _expand_attention_masks(model: onnx.ModelProto) -> int:
    """Give every standard `Attention` node's attn_mask its full query dim; returns how many.

    Workaround: onnxruntime 1.32's CPU `Attention` (opset 23) requires
    `attn_mask.shape[-2] == q_sequence_length` ("inconsistent q_sequence_length (between attn_mask
    and Q)", core/providers/cpu/llm/attention_helper.h), although the ONNX spec broadcasts the
    mask. SDPA exports our key-padding mask as [B, 1, 1, Tk]; an `Expand` to [B, 1, Tq, Tk] in
    front of the node keeps the result and satisfies the kernel.
    """
    ranks = {
        v.name: len(v.type.tensor_type.shape.dim)
        for v in [*model.graph.value_info, *model.graph.input]
        if v.type.tensor_type.HasField("shape")
    }
    ones: set[str] = set()

    def ones_of(length: int) -> str:  # an int64 initializer [1] * length, added once
        name = f"attndeploy_ones_{length}"
        if name not in ones:
            ones.add(name)
            model.graph.initializer.append(
                onnx.numpy_helper.from_array(np.ones(length, dtype=np.int64), name)
            )
        return name

    nodes: list[onnx.NodeProto] = []
    count = 0
    for index, node in enumerate(model.graph.node):
        is_attention = node.op_type == "Attention" and node.domain in ("", "ai.onnx")
        if is_attention and len(node.input) > 3 and node.input[3]:
            count += 1
            query, mask = node.input[0], node.input[3]
            prefix = f"attndeploy_mask_expand_{index}"
            nodes += [
                onnx.helper.make_node(
                    "Shape", [query], [f"{prefix}_q_len"], start=-2, end=-1
                ),  # [Tq]
                onnx.helper.make_node(
                    "Concat", [ones_of(ranks.get(mask, 4) - 2), f"{prefix}_q_len", ones_of(1)],
                    [f"{prefix}_shape"], axis=0,
                ),  # [1, 1, Tq, 1]
                onnx.helper.make_node(
                    "Expand", [mask, f"{prefix}_shape"], [f"{prefix}_mask"]
                ),  # [B, 1, Tq, Tk]
            ]
            node.input[3] = f"{prefix}_mask"
        nodes.append(node)
    if count:
        del model.graph.node[:]
        model.graph.node.extend(nodes)
    return count


def _trace(wrapper: _InterfaceWrapper, max_seq: int, opset: int) -> tuple[onnx.ModelProto, dict]:
    """The wrapper as an ONNX model (custom nodes still without functions), stage times."""
    interface = interface_of(wrapper.model.config)
    times: dict[str, float] = {}
    with _tracing_settings():
        started = time.perf_counter()
        _onnx_registry(opset)  # built once per process and opset
        times["registry"] = time.perf_counter() - started
        started = time.perf_counter()
        program = _capture(wrapper, max_seq)
        times["capture"] = time.perf_counter() - started
        started = time.perf_counter()
        try:
            onnx_program = _to_onnx(program, opset, interface)
            proto = onnx_program.model_proto
        except ExportError:
            raise
        except Exception as exc:  # the translator raises many types; keep its message
            raise ExportError(f"translation to ONNX failed: {_first_lines(exc)}") from exc
        times["translate"] = time.perf_counter() - started
    _name_dynamic_dims(proto, interface)
    _expand_attention_masks(proto)
    return proto, times


# ----------------------------------------------------------------------------- export


def _load(checkpoint_dir: Path, options: ExportOptions) -> tuple[Checkpoint, nn.Module, int]:
    ckpt = read_checkpoint(checkpoint_dir)
    config = ckpt.model_config
    max_seq = options.max_seq or config.max_seq
    if max_seq > config.max_seq:
        raise ExportError(
            f"--max-seq {max_seq} exceeds the model's max_seq {config.max_seq}: the position "
            "table has no rows beyond it"
        )
    if config.variant == "ganet" and config.ganet.gate_mode != "threshold":
        raise ExportError(
            "GA-Net gate_mode 'sample' draws random gates (PyTorch only); export needs the "
            "deterministic 'threshold' mode: set ganet gate_mode to 'threshold'"
        )
    model = ckpt.model.eval()  # whatever mode the checkpoint was saved in
    if options.fp16:
        model = model.half()
    return ckpt, model, max_seq


def _attach_functions(proto: onnx.ModelProto, opset: int, inline: bool) -> onnx.ModelProto:
    """Append the FunctionProtos of the custom op types used (or inline them all)."""
    used = sorted({n.op_type for n in proto.graph.node if n.domain == DOMAIN})
    if used:
        proto.functions.extend(function_protos(opset, used))
        if not any(o.domain == DOMAIN for o in proto.opset_import):
            proto.opset_import.append(onnx.helper.make_opsetid(DOMAIN, DOMAIN_VERSION))
    if inline and used:
        proto = onnx.inliner.inline_local_functions(proto)
        del proto.functions[:]
    if not any(n.domain == DOMAIN for n in proto.graph.node):  # imports only what it uses
        kept = [o for o in proto.opset_import if o.domain != DOMAIN]
        del proto.opset_import[:]
        proto.opset_import.extend(kept)
    return proto


def runtime_check(model: onnx.ModelProto, config: Any, max_seq: int, *, fp16: bool) -> None:
    """Run the model once in onnxruntime's CPU provider (2 rows, one padded; not the export
    example's shape) and check the outputs' names, dtypes, shapes and finiteness.

    Catches what onnx.checker cannot: a kernel the runtime lacks (e.g. for float16) or a node it
    refuses at run time. Skipped when onnxruntime is not installed.
    """
    try:
        import onnxruntime as ort
    except ImportError:
        return
    interface = interface_of(config)
    seq = min(3, max_seq)
    ids = np.full((2, seq), 1 % config.vocab_size, dtype=np.int64)
    mask = np.ones((2, seq), dtype=np.int64)
    mask[1, 1:] = 0
    where = f"onnxruntime {ort.__version__} (CPUExecutionProvider)"
    session_options = ort.SessionOptions()
    session_options.log_severity_level = 3  # errors only: fp16 graphs log harmless warnings
    try:
        session = ort.InferenceSession(
            model.SerializeToString(), session_options, providers=["CPUExecutionProvider"]
        )
        outputs = session.run(interface.output_names, make_feed(ids, mask))
    except Exception as exc:  # onnxruntime raises its own pybind types
        hint = (
            " The model is float16: onnxruntime's CPU provider lacks a float16 kernel the graph"
            " needs; export without --fp16 for CPU serving, or serve on a GPU provider."
            if fp16 and "implementation" in str(exc).lower() else ""
        )
        raise ExportError(f"{where} cannot run the exported model: "
                          f"{_first_lines(exc, 3)}{hint}") from exc
    sizes = {BATCH: 2, SEQ: seq}
    for spec, value in zip(interface.outputs, outputs, strict=True):
        want = tuple(sizes.get(d, d) for d in spec.dims)
        if value.dtype != spec.numpy_dtype or value.shape != want:
            raise ExportError(
                f"{where}: output {spec.name} is {value.dtype} {list(value.shape)}, expected "
                f"{spec.dtype} {list(want)}"
            )
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            raise ExportError(f"{where}: output {spec.name} holds non-finite values")


def export_checkpoint(
    checkpoint_dir: Path, out_path: Path, options: ExportOptions | None = None
) -> ExportResult:
    """Export a checkpoint to `out_path` (written atomically) and check the graph's contract.

    Nothing is written unless every check passes; a failure raises ExportError and leaves any
    previous file at `out_path` untouched.
    """
    options = options or ExportOptions()
    started, cpu_started = time.perf_counter(), time.process_time()
    ckpt, model, max_seq = _load(Path(checkpoint_dir), options)
    config = ckpt.model_config
    stages = {"load": time.perf_counter() - started}
    proto, trace_times = _trace(_InterfaceWrapper(model), max_seq, options.opset)
    stages.update(trace_times)
    finishing = time.perf_counter()
    proto = _attach_functions(proto, options.opset, options.inline_functions)
    custom = check_structure(proto, config, inlined=options.inline_functions)
    metadata = build_metadata(ckpt, options, max_seq)
    del proto.metadata_props[:]
    for key, value in metadata.items():
        proto.metadata_props.append(onnx.StringStringEntryProto(key=key, value=value))
    proto.producer_name, proto.producer_version = "attndeploy", __version__
    try:
        onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as exc:
        raise ExportError(f"the exported model fails onnx.checker: {exc}") from exc
    stages["finish"] = time.perf_counter() - finishing
    checking = time.perf_counter()
    runtime_check(proto, config, max_seq, fp16=options.fp16)
    stages["runtime_check"] = time.perf_counter() - checking
    atomic_write_bytes(Path(out_path), proto.SerializeToString())
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    return ExportResult(
        Path(out_path), seconds, custom, metadata, options, stages, cpu_seconds
    )


def read_metadata(model: onnx.ModelProto | Path) -> dict[str, str]:
    """attndeploy's metadata_props of a model (keys without the prefix); {} if none."""
    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(str(model), load_external_data=False)
    return {
        p.key[len(META_PREFIX):]: p.value
        for p in model.metadata_props if p.key.startswith(META_PREFIX)
    }
