"""Triton `config.pbtxt` of one packaged model, built through protobuf one section at a time.

`build_config` fills a `model_config_pb2.ModelConfig` with `_set_io`, `_set_batching`,
`_set_instances`, `_set_warmup`, `_set_version_policy` and `_set_parameters`, each deriving what
it writes from the model-level interface (`interface.py`) and the `PackageOptions`;
`serialize_config` writes it with `text_format` (the layout of pytriton's config generator).
The files a config refers to (labels, warm-up data) are produced here too (`model_files`), so a
config and its files cannot disagree.
"""

from __future__ import annotations

import numpy as np
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from attndeploy.echo import echo
from attndeploy.errors import RepositoryError
from attndeploy.interface import (
    ATTENTION_MASK,
    LOGITS,
    SEQ,
    ModelInterface,
)
from attndeploy.serving.packaging.generic import GenericInfo, generic_io
from attndeploy.serving.packaging.onnx_info import ModelInfo
from attndeploy.serving.packaging.options import Flavor, Kind, PackageOptions

PYTHON_BACKEND = "python"
ONNXRUNTIME_PLATFORM = "onnxruntime_onnx"
CONFIG_FILE = "config.pbtxt"
MODEL_FILE = "model.onnx"
MODEL_PY = "model.py"
LABELS_FILE = "labels.txt"
# Triton resolves a warm-up `input_data_file` relative to `<model>/warmup/`.
WARMUP_DIR = "warmup"
WARMUP_NAME = "ones_batch1_seq8"
WARMUP_SEQ = 8

# Parameters the generated model.py reads (python flavour).
PARAM_MAX_SEQ = "MAX_SEQ"
PARAM_VOCAB_SIZE = "VOCAB_SIZE"
PARAM_HEAD = "HEAD"
PARAM_GATED = "GATED"
PARAM_NUM_LABELS = "NUM_LABELS"
PARAM_ORT_THREADS = "ORT_THREADS"
# Generic and text models. An id model needs none: it refuses seq > MAX_SEQ and Triton refuses
# batch > max_batch_size, so a request it runs holds max_batch_size * MAX_SEQ * 16 bytes at most.
PARAM_MAX_REQUEST_BYTES = "MAX_REQUEST_BYTES"
PARAM_EXECUTION_ENV = "EXECUTION_ENV_PATH"  # read by the python backend itself
# Read by Triton's onnxruntime backend.
PARAM_ORT_INTRA_OP = "intra_op_thread_count"

_KINDS = {Kind.CPU: mc.ModelInstanceGroup.KIND_CPU, Kind.GPU: mc.ModelInstanceGroup.KIND_GPU}


# --------------------------------------------------------------------------- sections


def _set_io(
    cfg: mc.ModelConfig, interface: ModelInterface, *, ragged: bool, labels: bool
) -> None:
    """`input` and `output` blocks from the interface; batch implicit, `seq` as -1.

    `ragged`: mark the inputs `allow_ragged_batch`. Triton's dynamic batcher puts requests of
    different shapes into one execution only for such inputs; the python flavour's model.py pads
    the requests of one `execute` call to the longest and slices the outputs back, so requests of
    different lengths really share one onnxruntime call.
    `labels`: point `logits` at `labels.txt` (`label_filename`, for Triton's classification
    extension); only for `[num_labels]` logits.
    """
    for spec in interface.inputs:
        entry = cfg.input.add()
        entry.name = spec.name
        entry.data_type = mc.DataType.Value(spec.triton_type)
        entry.dims.extend(spec.triton_dims)
        if ragged:
            entry.allow_ragged_batch = True
    for spec in interface.outputs:
        out = cfg.output.add()
        out.name = spec.name
        out.data_type = mc.DataType.Value(spec.triton_type)
        out.dims.extend(spec.triton_dims)
        if labels and spec.name == LOGITS:
            out.label_filename = LABELS_FILE


def _set_batching(cfg: mc.ModelConfig, options: PackageOptions) -> None:
    """`max_batch_size` and, when enabled, the dynamic batcher with its queue delay."""
    cfg.max_batch_size = options.max_batch_size
    if options.dynamic_batching:
        cfg.dynamic_batching.max_queue_delay_microseconds = options.max_queue_delay_us


def _set_instances(cfg: mc.ModelConfig, kind: Kind, count: int) -> None:
    """One instance group of `count` instances of `kind`."""
    group = cfg.instance_group.add()
    group.count = count
    group.kind = _KINDS[kind]


def _set_warmup(cfg: mc.ModelConfig, interface: ModelInterface, seq: int) -> None:
    """One warm-up request of batch 1 and `seq` tokens: ids all 0, attention_mask all 1.

    An all-zero attention_mask is an invalid request (no real token), so the mask comes from a
    data file of int64 ones (`warmup_data`), written to `<model>/warmup/attention_mask`; every
    other input is `zero_data`. Triton counts warm-up requests in the model statistics.
    """
    warmup = cfg.model_warmup.add()
    warmup.name = WARMUP_NAME if seq == WARMUP_SEQ else f"ones_batch1_seq{seq}"
    warmup.batch_size = 1
    for spec in interface.inputs:
        entry = warmup.inputs[spec.name]
        entry.data_type = mc.DataType.Value(spec.triton_type)
        entry.dims.extend([seq if d == -1 else d for d in spec.triton_dims])
        if spec.name == ATTENTION_MASK:
            entry.input_data_file = ATTENTION_MASK
        else:
            entry.zero_data = True


def _set_version_policy(cfg: mc.ModelConfig, version: int) -> None:
    """Serve exactly the packaged version (the linter checks that its folder exists)."""
    cfg.version_policy.specific.versions.append(version)


def _set_parameters(cfg: mc.ModelConfig, parameters: dict[str, str]) -> None:
    """String parameters (`parameters { key: ... value { string_value: ... } }`)."""
    for key, value in parameters.items():
        cfg.parameters[key].string_value = value


# --------------------------------------------------------------------------- the whole config


def warmup_seq(max_seq: int) -> int:
    """The warm-up request's length: 8 tokens, or `max_seq` when the model takes fewer."""
    return min(WARMUP_SEQ, max_seq)


def effective_max_seq(info: ModelInfo, options: PackageOptions) -> int:
    """The longest request served: the model's `max_seq`, or the lower limit in `options`."""
    if options.max_seq is None:
        return info.max_seq
    if options.max_seq > info.max_seq:
        raise RepositoryError(
            f"max_seq {options.max_seq} exceeds the model's own maximum of {info.max_seq}."
        )
    return options.max_seq


def python_parameters(info: ModelInfo, options: PackageOptions) -> dict[str, str]:
    """The parameters the generated model.py reads (and, optionally, `EXECUTION_ENV_PATH`)."""
    parameters = {
        PARAM_MAX_SEQ: str(effective_max_seq(info, options)),
        PARAM_VOCAB_SIZE: str(info.vocab_size),
        PARAM_HEAD: info.head,
        PARAM_GATED: "true" if info.gated else "false",
        PARAM_NUM_LABELS: str(info.num_labels),
        PARAM_ORT_THREADS: str(options.threads),
    }
    if options.execution_env is not None:
        parameters[PARAM_EXECUTION_ENV] = str(options.execution_env.resolve())
    return parameters


def _new_config(name: str, flavor: Flavor) -> mc.ModelConfig:
    """An empty config of model `name` on `flavor`'s backend (one concrete flavour)."""
    if flavor is Flavor.BOTH:
        raise ValueError("a model config takes one concrete flavor; expand `both` first")
    cfg = mc.ModelConfig()
    cfg.name = name
    if flavor is Flavor.PYTHON:
        cfg.backend = PYTHON_BACKEND
    else:
        cfg.platform = ONNXRUNTIME_PLATFORM
    return cfg


def build_config(
    info: ModelInfo, options: PackageOptions, *, name: str, flavor: Flavor
) -> mc.ModelConfig:
    """The `ModelConfig` of model `name` in `flavor` (python or onnxruntime, not both)."""
    interface = info.interface
    cfg = _new_config(name, flavor)
    _set_version_policy(cfg, options.version)
    _set_batching(cfg, options)
    _set_io(
        cfg,
        interface,
        ragged=flavor is Flavor.PYTHON and options.dynamic_batching,
        labels=SEQ not in interface.spec(LOGITS).dims,  # one score per label per text
    )
    _set_instances(cfg, options.kind_for(flavor), options.instances)
    if flavor is Flavor.PYTHON:
        _set_parameters(cfg, python_parameters(info, options))
    else:
        _set_parameters(cfg, {PARAM_ORT_INTRA_OP: str(options.threads)})
    if options.warmup:
        _set_warmup(cfg, interface, warmup_seq(effective_max_seq(info, options)))
    return cfg


def build_generic_config(
    info: GenericInfo, options: PackageOptions, *, name: str, flavor: Flavor
) -> mc.ModelConfig:
    """The `ModelConfig` of a generic model (`generic.py`): I/O from the graph, batching only
    over a shared batch dim, no warm-up, and for the python flavour only `ORT_THREADS` and
    `MAX_REQUEST_BYTES`."""
    cfg = _new_config(name, flavor)
    _set_version_policy(cfg, options.version)
    if info.batched:
        _set_batching(cfg, options)
    else:
        cfg.max_batch_size = 0  # the graph has no shared batch dim: full dims, no batching
    generic_io(cfg, info)
    _set_instances(cfg, options.kind_for(flavor), options.instances)
    if flavor is Flavor.PYTHON:
        parameters = {PARAM_ORT_THREADS: str(options.threads),
                      PARAM_MAX_REQUEST_BYTES: str(options.max_request_bytes)}
        if options.execution_env is not None:
            parameters[PARAM_EXECUTION_ENV] = str(options.execution_env.resolve())
        _set_parameters(cfg, parameters)
    else:
        _set_parameters(cfg, {PARAM_ORT_INTRA_OP: str(options.threads)})
    return cfg


def serialize_config(cfg: mc.ModelConfig) -> str:
    """`config.pbtxt` text of `cfg` (protobuf text format)."""
    return text_format.MessageToString(cfg)


def parse_config(text: str, source: str = "config.pbtxt") -> mc.ModelConfig:
    """Parse `config.pbtxt` text with Triton's schema; RepositoryError on any syntax error."""
    cfg = mc.ModelConfig()
    try:
        text_format.Parse(text, cfg)
    except text_format.ParseError as exc:
        raise RepositoryError(
            f"{source} does not parse as a Triton ModelConfig: {echo(str(exc))}"
        ) from exc
    return cfg


# --------------------------------------------------------------------------- files it refers to


def labels_text(info: ModelInfo) -> str:
    """`labels.txt`: one label name per line, line i = class index i."""
    return "".join(f"{label}\n" for label in info.labels)


def warmup_data(seq: int) -> dict[str, bytes]:
    """Raw warm-up input files by name (Triton reads them as the input's dtype, row-major)."""
    return {ATTENTION_MASK: np.ones((1, seq), dtype=np.int64).tobytes()}


def model_files(info: ModelInfo, options: PackageOptions) -> dict[str, str | bytes]:
    """Files beside `config.pbtxt` (relative path -> text or bytes): labels and warm-up data.

    `labels.txt` is written for both heads (clients read the names from it); only a classifier's
    `logits` refer to it through `label_filename`, since Triton's classification extension ranks
    a `[num_labels]` output, not a `[seq, num_labels]` one.
    """
    files: dict[str, str | bytes] = {LABELS_FILE: labels_text(info)}
    if options.warmup:
        seq = warmup_seq(effective_max_seq(info, options))
        for name, data in warmup_data(seq).items():
            files[f"{WARMUP_DIR}/{name}"] = data
    return files

