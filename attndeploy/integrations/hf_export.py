"""Converted Hugging Face models to ONNX: `export_hf_checkpoint`, which
`attndeploy.export.exporter.export_checkpoint` calls for a checkpoint with an `"hf"` section
(read by `attndeploy.integrations.hf_checkpoint`), and `write_model_streaming`.
"""

from __future__ import annotations

import contextlib
import gc
import os
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import onnx

from attndeploy.checkpoint import read_checkpoint
from attndeploy.errors import ExportError
from attndeploy.export import generic, tracing
from attndeploy.export.exporter import build_metadata, interface_of, runtime_check, trace_checkpoint
from attndeploy.export.generic import ExportOptions, ExportResult
from attndeploy.fsutil import (
    check_output_file,
    current_umask,
    output_error,
    remove_stale_temporaries,
)
from attndeploy.integrations.hf_checkpoint import HFModelConfig
from attndeploy.integrations.transformers import conversion_of
from attndeploy.runtime.names import META_HF_ARCHITECTURE, META_HF_MODEL_TYPE


def _check_structure(proto: Any, config: HFModelConfig, expected: Counter, lstms: int, *,
                     inlined: bool) -> dict[str, int]:
    """One `attndeploy` node per attention layer (`expected`, each with its function, no random
    op), `lstms` `LSTM` nodes (a BiLSTM gate network: one per direction), symbolic dims."""
    found = tracing.check_custom_nodes(proto, Counter() if inlined else expected,
                                        inlined=inlined)
    got = sum(n.op_type == "LSTM" and n.domain in ("", "ai.onnx") for n in proto.graph.node)
    if got != lstms:
        raise ExportError(f"the exported graph holds {got} LSTM nodes, expected {lstms} "
                          "(one per direction)")
    interface = interface_of(config)
    for value in list(proto.graph.input) + list(proto.graph.output):
        dims = tracing.dims_of(value)
        for axis, want in enumerate(interface.spec(value.name).dims):
            got_dim = dims[axis] if axis < len(dims) else None
            if got_dim != want:
                raise ExportError(f"{value.name}: dimension {axis} is {got_dim!r}, expected "
                                  f"{want!r}")
    return found


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        if not value:
            out.append(low)
            return bytes(out)
        out.append(low | 0x80)


def _copy_fields(source: Any, target: Any, skip: str) -> None:
    """Every set field of protobuf message `source` but `skip`, copied into `target`."""
    for descriptor, value in source.ListFields():
        if descriptor.name == skip:
            continue
        repeated = getattr(descriptor, "is_repeated", None)  # protobuf >= 6; `label` before
        if repeated is None:
            repeated = descriptor.label == descriptor.LABEL_REPEATED
        if repeated:
            getattr(target, descriptor.name).extend(value)
        elif descriptor.type == descriptor.TYPE_MESSAGE:
            getattr(target, descriptor.name).CopyFrom(value)
        else:
            setattr(target, descriptor.name, value)


def write_model_streaming(proto: onnx.ModelProto, handle: Any) -> None:
    """Write `proto` serialized, one initializer at a time.

    `SerializeToString` (upb) holds the whole serialized model twice while it builds it: about
    2.4x the weights on top of the proto (BERT-base: +1 GB). Protobuf parses repeated occurrences
    of an embedded message field as their merge (repeated fields append), so the model without
    initializers followed by one `graph {initializer: [...]}` field per initializer reads back as
    `proto` (same initializer order), with at most one initializer's bytes in memory.
    """
    graph = onnx.GraphProto()
    _copy_fields(proto.graph, graph, "initializer")
    header = onnx.ModelProto()
    _copy_fields(proto, header, "graph")
    header.graph.CopyFrom(graph)
    handle.write(header.SerializeToString())
    tag = _varint(onnx.ModelProto.DESCRIPTOR.fields_by_name["graph"].number << 3 | 2)
    for initializer in proto.graph.initializer:
        piece = onnx.GraphProto(initializer=[initializer]).SerializeToString()
        handle.write(tag + _varint(len(piece)) + piece)


@contextmanager
def _staged_file(path: Path) -> Iterator[Path]:
    """A temp file beside `path` that becomes `path` when the block succeeds and is removed when
    it fails; named like `attndeploy.fsutil`'s temporaries, so a killed run's is cleaned up by
    the next write of `path`."""
    check_output_file(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(path)
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp",
                                    dir=path.parent)
        os.close(fd)
    except OSError as exc:
        raise output_error(path, exc) from exc
    staged = Path(name)
    try:
        yield staged
        os.chmod(staged, 0o666 & ~current_umask())
        os.replace(staged, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            staged.unlink()
        if isinstance(exc, OSError):
            raise output_error(path, exc) from exc
        raise


def export_hf_checkpoint(checkpoint_dir: Path, out_path: Path, options: Any = None) -> Any:
    """`export_checkpoint` for a converted HF model: the same interface (`input_ids`,
    `attention_mask` -> `logits`[, `gates`]), stages, checks and metadata, plus
    `attndeploy.hf_architecture` and `attndeploy.hf_model_type`; the file appears only when
    every check has passed.

    Peak memory (BERT-base: 420 MB of fp32 weights). The weights can exist as torch tensors, in
    the ONNX proto, serialized, and in the onnxruntime session of the runtime check, and
    serializing or parsing a proto transiently doubles its size. So: the torch model is released
    once traced; the proto is streamed to a temp file beside the target
    (`write_model_streaming`) and released; onnx.checker and the runtime check read that file;
    then it is renamed into place. No step holds two copies of the weights.
    """
    options = options or ExportOptions()
    started, cpu_started = time.perf_counter(), time.process_time()
    out_path = Path(out_path)
    check_output_file(out_path)  # before the work: a folder in the way, a read-only place
    ckpt = read_checkpoint(Path(checkpoint_dir))
    config = ckpt.model_config
    max_seq = options.max_seq or config.max_seq
    if max_seq > config.max_seq:
        raise ExportError(f"--max-seq {max_seq} exceeds the model's max_seq {config.max_seq}")
    conversion = conversion_of(ckpt.model.model)
    expected, lstms = conversion.expected_nodes(), conversion.expected_lstm_nodes()
    metadata = build_metadata(ckpt, options, max_seq)
    metadata[META_HF_ARCHITECTURE] = config.architecture
    metadata[META_HF_MODEL_TYPE] = config.model_type
    model = ckpt.model.eval()
    if options.fp16:
        model = model.half()
    del ckpt, conversion
    stages = {"load": time.perf_counter() - started}
    traced = trace_checkpoint(model, max_seq, options.opset, options.inline_functions)
    del model  # the torch weights: not needed once traced
    gc.collect()
    stages.update(traced.stages)
    finishing = time.perf_counter()
    proto, input_names, output_names = traced.proto, traced.input_names, traced.output_names
    del traced
    custom = _check_structure(proto, config, expected, lstms, inlined=options.inline_functions)
    generic.set_metadata(proto, metadata)
    with _staged_file(out_path) as staged:
        with open(staged, "wb") as handle:
            write_model_streaming(proto, handle)
        del proto
        gc.collect()
        try:
            onnx.checker.check_model(str(staged))
        except onnx.checker.ValidationError as exc:
            raise ExportError(f"the exported model fails onnx.checker: {exc}") from exc
        stages["finish"] = time.perf_counter() - finishing
        checking = time.perf_counter()
        runtime_check(staged, config, max_seq, fp16=options.fp16)
        stages["runtime_check"] = time.perf_counter() - checking
    return ExportResult(
        out_path, time.perf_counter() - started, custom, metadata, options, stages,
        time.process_time() - cpu_started, input_names, output_names,
    )
