"""Checkpoint -> ONNX: every attention layer one `attndeploy` node with a model-local function.

Route (architecture.md, "Export: facts established"): while torch.onnx traces the model, the
attention modules call torch custom ops (`dispatch.override_ops`); the translation table turns each
into an opaque node of domain `attndeploy`, and the onnxscript bodies are appended afterwards as
FunctionProtos, because the exporter inlines every function it records itself
(microsoft/onnxscript#2813, pytorch/pytorch#154319).
"""

from __future__ import annotations

import contextlib
import io
import json
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx
import onnx.inliner
import torch
from torch import nn

from attndeploy import __version__
from attndeploy.checkpoint import Checkpoint, read_checkpoint
from attndeploy.errors import ExportError
from attndeploy.export._registry import (
    DEFAULT_OPSET,
    SUPPORTED_OPSETS,
    custom_translation_table,
    export_op_table,
    function_protos,
)
from attndeploy.export.ops._common import DOMAIN, DOMAIN_VERSION
from attndeploy.fsutil import atomic_write_bytes
from attndeploy.serving.interface import ModelInterface, model_interface
from attndeploy.variants import dispatch

META_PREFIX = "attndeploy."
# Ops each variant's attention layers become, and the pooling op of gated classifiers.
LAYER_OPS = {
    "standard": None,
    "qvi": {"pooled": "QVIAttention", "pairwise": "QVIPairwiseAttention"},
    "ganet": "GatedAttention",
    "evolving": ("EvolvingAttentionStart", "EvolvingAttention"),
}


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

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "seconds": round(self.seconds, 3),
            "stages": {k: round(v, 3) for k, v in self.stages.items()},
            "custom_nodes": self.custom_nodes,
            "opset": self.options.opset,
            "fp16": self.options.fp16,
            "inline_functions": self.options.inline_functions,
            "variant": self.metadata.get(META_PREFIX + "variant"),
        }


def interface_of(config: Any) -> ModelInterface:
    """The model-level interface (ops.md) of a model with this config."""
    return model_interface(
        head=config.head, num_labels=config.num_labels, gated=config.variant == "ganet"
    )


class _InterfaceWrapper(nn.Module):
    """The model-level interface as a plain tuple: (logits[, gates]); fp16 logits cast to fp32."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.output_names = interface_of(model.config).output_names

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple:
        outputs = self.model(input_ids, attention_mask)
        outputs["logits"] = outputs["logits"].float()
        return tuple(outputs[name] for name in self.output_names)


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


def _dims(value_info: onnx.ValueInfoProto) -> list[str | int]:
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


def check_structure(model: onnx.ModelProto, config: Any, *, inlined: bool) -> dict[str, int]:
    """Assert the contract: custom nodes per layer, a function per op type, symbolic dims."""
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
    interface = interface_of(config)
    for value in list(model.graph.input) + list(model.graph.output):
        spec = interface.spec(value.name)
        want = {axis: d for axis, d in enumerate(spec.dims) if isinstance(d, str)}
        dims = _dims(value)
        for axis, symbol in want.items():
            if axis >= len(dims) or dims[axis] != symbol:
                raise ExportError(
                    f"{value.name}: dimension {axis} is {dims[axis] if axis < len(dims) else None}"
                    f", expected the symbolic {symbol!r} (the exporter pinned a dynamic dim)"
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


def _trace(wrapper: nn.Module, max_seq: int, opset: int) -> onnx.ModelProto:
    example_seq = min(8, max_seq)
    example = (
        torch.randint(2, max(3, wrapper.model.config.vocab_size), (2, example_seq)),
        torch.ones(2, example_seq, dtype=torch.long),
    )
    batch = torch.export.Dim("batch", min=1, max=4096)
    seq = torch.export.Dim("seq", min=1, max=max_seq)
    interface = interface_of(wrapper.model.config)
    with dispatch.override_ops(export_op_table()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        log = io.StringIO()
        try:
            with contextlib.redirect_stdout(log):
                program = torch.onnx.export(
                    wrapper, example, dynamo=True, opset_version=opset,
                    input_names=list(interface.input_names),
                    output_names=list(interface.output_names),
                    dynamic_shapes={
                        "input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}
                    },
                    custom_translation_table=custom_translation_table(),
                    verbose=False, report=False,
                )
        except Exception as exc:  # the exporter raises many types; keep its message
            raise ExportError(f"torch.onnx.export failed: {exc}") from exc
    return program.model_proto


def export_checkpoint(
    checkpoint_dir: Path, out_path: Path, options: ExportOptions | None = None
) -> ExportResult:
    """Export a checkpoint to `out_path` (written atomically) and check the graph's contract."""
    options = options or ExportOptions()
    started = time.perf_counter()
    stages: dict[str, float] = {}
    ckpt = read_checkpoint(checkpoint_dir)
    config = ckpt.model_config
    max_seq = options.max_seq or config.max_seq
    if max_seq > config.max_seq:
        raise ExportError(f"--max-seq {max_seq} exceeds the model's max_seq {config.max_seq}")
    if config.variant == "ganet" and config.ganet.gate_mode != "threshold":
        raise ExportError(
            "GA-Net gate_mode 'sample' is PyTorch-only (random gates); export needs 'threshold'"
        )
    model = ckpt.model.eval()
    if options.fp16:
        model = model.half()
    stages["load"] = time.perf_counter() - started
    proto = _trace(_InterfaceWrapper(model), max_seq, options.opset)
    stages["trace"] = time.perf_counter() - started - stages["load"]
    proto.functions.extend(function_protos(options.opset))
    if not any(o.domain == DOMAIN for o in proto.opset_import):
        proto.opset_import.append(onnx.helper.make_opsetid(DOMAIN, DOMAIN_VERSION))
    if options.inline_functions:
        proto = onnx.inliner.inline_local_functions(proto)
        del proto.functions[:]
    used = {n.domain for n in proto.graph.node}
    if DOMAIN not in used:  # keep the model's imports to what it uses (standard, inlined)
        kept = [o for o in proto.opset_import if o.domain != DOMAIN]
        del proto.opset_import[:]
        proto.opset_import.extend(kept)
        if not options.inline_functions:
            del proto.functions[:]
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
    atomic_write_bytes(Path(out_path), proto.SerializeToString())
    seconds = time.perf_counter() - started
    stages["finish"] = seconds - stages["load"] - stages["trace"]
    return ExportResult(Path(out_path), seconds, custom, metadata, options, stages)


def read_metadata(model: onnx.ModelProto | Path) -> dict[str, str]:
    """attndeploy's metadata_props of a model (keys without the prefix); {} if none."""
    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(str(model), load_external_data=False)
    return {
        p.key[len(META_PREFIX):]: p.value
        for p in model.metadata_props if p.key.startswith(META_PREFIX)
    }
