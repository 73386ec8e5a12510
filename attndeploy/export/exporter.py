"""Checkpoint -> ONNX: every attention layer one `attndeploy` node with a model-local function.

A thin user of `attndeploy.export.generic.export_model`'s machinery: the checkpoint's model is
wrapped into the model-level interface of docs/ops.md (`input_ids`, `attention_mask` -> the
family's outputs, e.g. `logits`[, `gates`]), traced with `batch` and `seq` dynamic (seq up to the
model's max_seq), and checked against what its config promises (`check_structure`: the custom
nodes per layer, one `LSTM` per direction run, the interface's dims) on top of the generic
checks.

Stages (timed in `ExportResult.stages`):
  load           read the checkpoint (eval mode; fp16 when asked)
  registry       torch.onnx's op registry plus our translations, built once per process/opset
  capture        `torch.export.export`, non-strict, batch and seq dynamic. Called directly, not
                 through `torch.onnx.export(model, ...)`, whose fallback strategies re-export
                 with torch's "suggested fixes" and silently pin a dynamic dim
                 (docs/architecture.md).
  translate      decomposition, ONNX translation, onnxscript optimizer (`tracing.to_onnx`); then
                 the dims get the interface's names and the `Attention` masks their query dim
  finish         function bodies, structure checks (`check_structure`), metadata, onnx.checker
  runtime_check  one run in onnxruntime's CPU provider; then the atomic write
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from torch import nn

from attndeploy import __version__, checkpoint_formats
from attndeploy.checkpoint import Checkpoint, read_checkpoint, read_config
from attndeploy.errors import ExportError
from attndeploy.export import generic, tracing
from attndeploy.export.generic import ExportOptions, ExportResult
from attndeploy.fsutil import atomic_write_bytes
from attndeploy.interface import (
    BATCH,
    SEQ,
    TAGS_OUTPUT,
    ModelInterface,
    make_feed,
    model_interface,
)
from attndeploy.opspec.bodies import DOMAIN_VERSION
from attndeploy.runtime.contract import CONTRACT_VERSION
from attndeploy.runtime.names import (
    ATTENTION_MASK,
    INPUT_IDS,
    META_CONFIG,
    META_CONTRACT_VERSION,
    META_DOMAIN_VERSION,
    META_DTYPE,
    META_FAMILY,
    META_HEAD,
    META_INLINED,
    META_LABELS,
    META_MAX_SEQ,
    META_OPSET,
    META_PREFIX,
    META_TOKENIZER,
    META_VARIANT,
    META_VERSION,
    META_WEIGHTS,
)
from attndeploy.variants.op_registry import DEFAULT_OPSET, SUPPORTED_OPSETS  # noqa: F401
from attndeploy.variants.registry import variant_spec

__all__ = [
    "ExportOptions", "ExportResult", "check_structure", "export_checkpoint", "read_metadata",
    "runtime_check",
]

RANDOM_OPS = tracing.RANDOM_OPS
random_ops = tracing.random_ops
# Largest batch the traced graph is declared for (ONNX dims carry no bound; torch.export needs one).
MAX_BATCH = 4096
EXAMPLE_BATCH, EXAMPLE_SEQ = 2, 8


def interface_of(config: Any) -> ModelInterface:
    """The model-level interface (docs/ops.md) of a model with this config."""
    return model_interface(
        head=config.head, num_labels=config.num_labels, gated=variant_spec(config.variant).gated,
        tag_head=getattr(config, "tag_head", "softmax"),
    )


class _InterfaceWrapper(nn.Module):
    """The model-level interface: (input_ids, attention_mask) -> the family's outputs (e.g.
    {"logits"}) [and "gates"], those declared float32 cast to it (an fp16 model's logits),
    nothing else (no training details)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        interface = interface_of(model.config)
        self.output_names = interface.output_names
        self.float_outputs = [s.name for s in interface.outputs if s.dtype == "float32"]

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict:
        outputs = self.model(input_ids, attention_mask)
        if TAGS_OUTPUT in self.output_names:  # a CRF tagger: Viterbi inside the graph
            outputs[TAGS_OUTPUT] = self.model.head.crf.viterbi(outputs["logits"],
                                                               attention_mask != 0)
        for name in self.float_outputs:
            outputs[name] = outputs[name].float()
        return {name: outputs[name] for name in self.output_names}


# ----------------------------------------------------------------------------- contract


def expected_custom_nodes(config: Any) -> Counter:
    """How many nodes of each `attndeploy` op type the exported graph must hold (the variant's
    `VariantSpec.model_ops`)."""
    return Counter(variant_spec(config.variant).model_ops(config))


def expected_lstm_nodes(config: Any) -> int:
    """Standard `LSTM` nodes: one per direction and layer of every PaddedBiLSTM."""
    runs = 2 * 2 if config.family == "bilstm" else 0  # backbone: 2 layers x 2 directions
    return runs + variant_spec(config.variant).lstm_runs(config)  # e.g. a BiLSTM gate network


def check_structure(model: onnx.ModelProto, config: Any, *, inlined: bool) -> dict[str, int]:
    """Assert the contract: custom nodes per layer, a function per op type, one `LSTM` per
    direction run, no random op, symbolic dims. Returns the custom node counts."""
    found = tracing.check_custom_nodes(
        model, Counter() if inlined else expected_custom_nodes(config), inlined=inlined
    )
    lstms = sum(n.op_type == "LSTM" and n.domain in ("", "ai.onnx") for n in model.graph.node)
    if lstms != expected_lstm_nodes(config):
        raise ExportError(
            f"the exported graph holds {lstms} LSTM nodes, expected {expected_lstm_nodes(config)}"
            " (one per direction and layer)"
        )
    interface = interface_of(config)
    for value in list(model.graph.input) + list(model.graph.output):
        spec = interface.spec(value.name)
        dims = tracing.dims_of(value)
        for axis, want in enumerate(spec.dims):
            got = dims[axis] if axis < len(dims) else None
            if got != want:
                raise ExportError(
                    f"{value.name}: dimension {axis} is {got!r}, expected {want!r}"
                    + (" (the exporter pinned a dynamic dim)" if isinstance(want, str) else "")
                )
    return found


def build_metadata(ckpt: Checkpoint, options: ExportOptions, max_seq: int) -> dict[str, str]:
    config = ckpt.model_config
    return {
        META_VARIANT: config.variant,
        META_FAMILY: config.family,
        META_HEAD: config.head,
        META_VERSION: __version__,
        META_CONFIG: json.dumps(config.to_dict(), sort_keys=True),
        META_WEIGHTS: ckpt.weights_sha256,
        META_OPSET: str(options.opset),
        META_DOMAIN_VERSION: str(DOMAIN_VERSION),
        META_LABELS: json.dumps(list(ckpt.label_names)),
        META_MAX_SEQ: str(max_seq),
        META_DTYPE: "float16" if options.fp16 else "float32",
        META_INLINED: "true" if options.inline_functions else "false",
        META_TOKENIZER: json.dumps(ckpt.tokenizer.to_dict()) if ckpt.tokenizer else "",
        META_CONTRACT_VERSION: str(CONTRACT_VERSION),
    }


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
    variant_spec(config.variant).export_check(config)  # e.g. GA-Net's random `sample` gates
    model = ckpt.model.eval()  # whatever mode the checkpoint was saved in
    if options.fp16:
        model = model.half()
    return ckpt, model, max_seq


def runtime_check(model: onnx.ModelProto | bytes | Path, config: Any, max_seq: int, *,
                  fp16: bool) -> None:
    """Run the model once in onnxruntime's CPU provider (2 rows, one padded; not the export
    example's shape) and check the outputs' names, dtypes, shapes and finiteness.

    Catches what onnx.checker cannot: a kernel the runtime lacks (e.g. for float16) or a node it
    refuses at run time. Skipped when onnxruntime is not installed.
    """
    try:
        import onnxruntime as ort
    except ImportError:
        return
    from attndeploy.runtime.sessions import create_session

    interface = interface_of(config)
    seq = min(3, max_seq)
    ids = np.full((2, seq), 1 % config.vocab_size, dtype=np.int64)
    mask = np.ones((2, seq), dtype=np.int64)
    mask[1, 1:] = 0
    where = f"onnxruntime {ort.__version__} (CPUExecutionProvider)"
    try:  # errors-only logging: fp16 graphs log harmless warnings
        session = create_session(model)
        outputs = session.run(interface.output_names, make_feed(ids, mask))
    except Exception as exc:  # onnxruntime raises its own pybind types
        hint = (
            " The model is float16: onnxruntime's CPU provider lacks a float16 kernel the graph"
            " needs; export without --fp16 for CPU serving, or serve on a GPU provider."
            if fp16 and "implementation" in str(exc).lower() else ""
        )
        raise ExportError(f"{where} cannot run the exported model: "
                          f"{tracing.first_lines(exc, 3)}{hint}") from exc
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


def trace_checkpoint(model: nn.Module, max_seq: int, opset: int, inline: bool) -> generic.Traced:
    """The checkpoint's model traced through the interface, batch and seq dynamic."""
    vocab = model.config.vocab_size
    example_seq = min(EXAMPLE_SEQ, max_seq)
    generator = torch.Generator().manual_seed(0)
    inputs = {
        INPUT_IDS: torch.randint(min(2, vocab - 1), vocab, (EXAMPLE_BATCH, example_seq),
                                   generator=generator),
        ATTENTION_MASK: torch.ones(EXAMPLE_BATCH, example_seq, dtype=torch.long),
    }
    dims = {0: torch.export.Dim(BATCH, min=1, max=MAX_BATCH),
            1: torch.export.Dim(SEQ, min=1, max=max_seq)}
    wrapper = _InterfaceWrapper(model)
    return generic.trace_model(
        wrapper, inputs=inputs, dynamic_shapes={name: dims for name in inputs},
        output_names=wrapper.output_names, opset=opset, inline_functions=inline,
    )


def export_checkpoint(
    checkpoint_dir: Path, out_path: Path, options: ExportOptions | None = None
) -> ExportResult:
    """Export a checkpoint to `out_path` (written atomically) and check the graph's contract.

    Nothing is written unless every check passes; a failure raises ExportError and leaves any
    previous file at `out_path` untouched.
    """
    options = options or ExportOptions()
    tag = checkpoint_formats.tag_of(read_config(Path(checkpoint_dir)))
    if tag is not None:  # another format's checkpoint: its plug-in exports it
        try:
            export = checkpoint_formats.plugin(checkpoint_formats.EXPORTERS, tag)
        except LookupError as exc:
            raise ExportError(f"{checkpoint_dir}: {exc}") from None
        return export(Path(checkpoint_dir), Path(out_path), options)
    started, cpu_started = time.perf_counter(), time.process_time()
    ckpt, model, max_seq = _load(Path(checkpoint_dir), options)
    config = ckpt.model_config
    stages = {"load": time.perf_counter() - started}
    traced = trace_checkpoint(model, max_seq, options.opset, options.inline_functions)
    stages.update(traced.stages)
    finishing = time.perf_counter()
    proto = traced.proto
    custom = check_structure(proto, config, inlined=options.inline_functions)
    metadata = build_metadata(ckpt, options, max_seq)
    generic.set_metadata(proto, metadata)
    generic.check_model(proto)
    stages["finish"] = time.perf_counter() - finishing
    checking = time.perf_counter()
    runtime_check(proto, config, max_seq, fp16=options.fp16)
    stages["runtime_check"] = time.perf_counter() - checking
    atomic_write_bytes(Path(out_path), proto.SerializeToString())
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    return ExportResult(
        Path(out_path), seconds, custom, metadata, options, stages, cpu_seconds,
        traced.input_names, traced.output_names,
    )


def read_metadata(model: onnx.ModelProto | Path) -> dict[str, str]:
    """attndeploy's metadata_props of a model (keys without the prefix); {} if none."""
    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(str(model), load_external_data=False)
    return {
        p.key[len(META_PREFIX):]: p.value
        for p in model.metadata_props if p.key.startswith(META_PREFIX)
    }
