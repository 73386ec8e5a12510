"""torch.export -> ONNX, shared by `export_model` and `export_checkpoint`: the tracing machinery.

Route (docs/architecture.md, "Export: facts established"): while torch.export traces the model, the
attention layers call torch custom ops (`variants.api.call_op` sees
`torch.compiler.is_exporting()`) and every LSTM direction run calls `attndeploy_std::lstm`
(`attndeploy.export.lstm`, entered with `lstm_route`); the translation table turns each
attention op into an opaque node of domain `attndeploy` and each LSTM run into one standard ONNX
`LSTM` node. The onnxscript bodies are appended afterwards as FunctionProtos (`attach_functions`),
because the exporter inlines every function it records itself (microsoft/onnxscript#2813,
pytorch/pytorch#154319).

Letters in shape comments: B batch, H heads, Tq/Tk query/key positions.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from typing import Any

import numpy as np
import onnx
import onnx.inliner
import onnx.numpy_helper
import torch

from attndeploy.errors import ExportError
from attndeploy.export import gelu, lstm, sdpa
from attndeploy.opspec.bodies import DOMAIN, DOMAIN_VERSION
from attndeploy.variants.api import override_lstm
from attndeploy.variants.op_registry import custom_translation_table, function_protos, torch_ops

# G11: an exported graph is deterministic; none of these may appear, in the graph or a function.
RANDOM_OPS = frozenset({
    "RandomUniform", "RandomUniformLike", "RandomNormal", "RandomNormalLike",
    "Bernoulli", "Multinomial",
})


def translation_table(opset: int) -> dict[Any, Any]:
    """Every torch op the exporter translates itself: the `attndeploy` ops, the LSTM, GELU
    below opset 20 (in the order onnxruntime fuses, `attndeploy.export.gelu`) and scaled
    dot-product attention below opset 23 (no shape subgraph around Kᵀ, the scale one Mul on
    Q, `attndeploy.export.sdpa`)."""
    return {
        **custom_translation_table(), **lstm.custom_translation_table(),
        **gelu.translation_table(opset), **sdpa.translation_table(opset),
    }


@contextmanager
def lstm_route(lstm_weights: lstm.LSTMWeights) -> Iterator[None]:
    """LSTM direction runs as `attndeploy_std::lstm` (one ONNX `LSTM` node each)."""
    with ExitStack() as stack:
        if len(lstm_weights):
            stack.enter_context(override_lstm(lstm_weights.run))
        yield


def op_calls(program: torch.export.ExportedProgram) -> Counter:
    """The `attndeploy` ops the traced program calls, by ONNX op type: what the graph must hold."""
    ops = torch_ops()
    return Counter(
        ops[node.target].name for node in program.graph.nodes
        if node.op == "call_function" and node.target in ops
    )


@contextmanager
def tracing_settings() -> Iterator[None]:
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


def first_lines(exc: BaseException, limit: int = 25) -> str:
    lines = str(exc).strip().splitlines()
    return "\n".join(lines[:limit] + (["..."] if len(lines) > limit else []))


@functools.cache
def onnx_registry(opset: int) -> Any | None:
    """torch.onnx's op registry for `opset` plus our translations, built once per process.

    `torch.onnx.export` rebuilds it on every call: 1.5-2.5 s of re-parsing torchlib sources
    (onnxscript's `TracedOnnxFunction.function_ir` is not cached), a third of a small model's
    export. It is only read while exporting. None when this torch lacks the internal exporter
    API (`_core.export` with a `registry`, torch 2.6-2.13): then `to_onnx` takes the public
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


def to_onnx(program: torch.export.ExportedProgram, opset: int, names: Any) -> Any:
    """ExportedProgram -> torch.onnx.ONNXProgram: decompose, translate, optimize.

    `names` has `input_names` and `output_names`.
    """
    kwargs: dict[str, Any] = {
        "input_names": list(names.input_names), "output_names": list(names.output_names),
        "opset_version": opset, "optimize": True, "verify": False, "report": False,
        "verbose": False,
    }
    registry = onnx_registry(opset)
    if registry is not None:
        from torch.onnx._internal.exporter import _core

        return _core.export(program, registry=registry, **kwargs)
    return torch.onnx.export(
        program, (), dynamo=True, custom_translation_table=translation_table(opset), **kwargs
    )


def dims_of(value_info: onnx.ValueInfoProto) -> list[str | int]:
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


def name_dynamic_dims(
    model: onnx.ModelProto, dynamic_axes: Mapping[str, Mapping[int, str]]
) -> None:
    """Rename torch's dim symbols (`s43`, ...) to the declared names (`batch`, `seq`, ...).

    `dynamic_axes`: {input name: {axis: name}}. Every value of the graph is renamed, so the
    outputs get the names too.
    """
    inputs = {v.name: v for v in model.graph.input}
    names: dict[str, str] = {}
    for input_name, axes in dynamic_axes.items():
        if input_name not in inputs:
            continue
        dims = dims_of(inputs[input_name])
        for axis, new in axes.items():
            old = dims[axis] if axis < len(dims) else None
            if isinstance(old, str) and old and old != new:
                names[old] = new
    if not names:
        return
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
    values = [*model.graph.input, *model.graph.output, *model.graph.value_info]
    for value in values:
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param:
                dim.dim_param = pattern.sub(lambda m: names[m.group(1)], dim.dim_param)


def expand_attention_masks(model: onnx.ModelProto) -> int:
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


def attach_functions(
    proto: onnx.ModelProto, opset: int, inline: bool,
    protos: Callable[..., list[onnx.FunctionProto]] = function_protos,
) -> onnx.ModelProto:
    """Append the FunctionProtos of the custom op types used (or inline them all)."""
    used = sorted({n.op_type for n in proto.graph.node if n.domain == DOMAIN})
    if used:
        proto.functions.extend(protos(opset, used))
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


def random_ops(model: onnx.ModelProto) -> list[str]:
    """Random op types in the graph or any function body (G11: must be empty)."""
    nodes = [*model.graph.node, *(n for f in model.functions for n in f.node)]
    return sorted({n.op_type for n in nodes if n.domain in ("", "ai.onnx")} & RANDOM_OPS)


def check_custom_nodes(model: onnx.ModelProto, expected: Counter, *, inlined: bool) -> dict:
    """The `attndeploy` nodes are the expected ones (none when inlined), each op type has a
    function, and no random op is left. Returns the node counts."""
    found = Counter(n.op_type for n in model.graph.node if n.domain == DOMAIN)
    want = Counter() if inlined else Counter(expected)
    if found != want:
        raise ExportError(
            f"the exported graph holds {dict(found)} {DOMAIN} nodes, expected {dict(want)}"
        )
    functions = {(f.domain, f.name) for f in model.functions}
    missing = sorted(op for op in found if (DOMAIN, op) not in functions)
    if missing:
        raise ExportError(f"custom op(s) without a function body: {', '.join(missing)}")
    randoms = random_ops(model)
    if randoms:
        raise ExportError(f"the exported graph holds random ops {randoms}; export must be "
                          "deterministic (eval mode, GA-Net gate_mode 'threshold')")
    return dict(found)
