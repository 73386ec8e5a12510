"""The text model `<name>_text`: raw text in, label out, served beside the id model it calls.

`attndeploy package` writes one for every model whose ONNX metadata holds a tokenizer
(`attndeploy.tokenizer`), unless `PackageOptions.text` is off:

```
<name>_text/config.pbtxt      python backend; `text` BYTES [1] in; dynamic batching
<name>_text/labels.txt        the label names (the id model's)
<name>_text/tokenizer.json    the tokenizer record from the ONNX metadata
<name>_text/family_runtime.json
                              which shipped module decodes the model's family
<name>_text/<v>/model.py      generated from templates/text_model.py.tmpl
<name>_text/<v>/attndeploy/   byte-for-byte copies of the runtime's tokenizer and decoder, and
                              of the family's runtime part (attndeploy/families/<pkg>/runtime.py)
```

Interface (batch implicit): input `text` BYTES [1] (one UTF-8 text per row); outputs in the
prediction contract's wire form (`attndeploy.runtime.contract`, shipped with the model):
`tokens` BYTES [-1], the model family's fields as its runtime part declares them
(`wire_fields`; text classification: `label` BYTES [1], `logits` and `probabilities` FP32
[num_labels]; token classification: `tags` BYTES [-1], `logits` and `probabilities` FP32
[-1, num_labels]) and for GA-Net `attended` BYTES [1] (the open tokens, space-joined). The
parameters `CONTRACT_VERSION` and `LABEL_NAMES` tell a client which contract the answer follows
and the label names, without the repository.

How it runs the id model (parameter `ID_MODEL_CALL`, `text_call`):

- `onnxruntime`, when the id model is the python flavour (the default): `model.py` tokenizes the
  whole batch the dynamic batcher hands it, loads the id model's ONNX file from the id model's
  own version folder (`../<id model>/<ID_MODEL_VERSION>/model.onnx`; one file on disk, a second
  session in memory) and runs it in its own process with `ORT_THREADS` threads, then decodes.
  Each batch crosses the server once. Measured on all-MiniLM-L6-v2 fine-tuned on the Debian
  descriptions at concurrency 16 (`benchmarks/text_serving.py --onnx`): 1.14x the texts/s of
  BLS at a lower p95 (100 against 111 ms), and 1.05x the id model fed pre-tokenized ids.
- `bls`, when the id model is the onnxruntime backend's (GPU instances; the server's Python may
  have no onnxruntime), or with `PackageOptions.text_bls`: one BLS request per batch, so the id
  model's dynamic batcher merges the text model's batches with direct id requests and the
  weights are held once. The cost is a second trip through shared memory and a second batcher.

BLS rather than an ensemble: an ensemble would need a tokenizer model and a decoder model around
the id model, so two more python-backend hops per batch plus the ensemble scheduler's per-step
copies, and the decoder would need the tokens passed to it as one more intermediate tensor; for
GA-Net's `attended` the tokens and the gates must meet anyway. Either way a bad text is refused
before the id model runs. Triton does not know the dependency: `attndeploy serve` adds the id
model to what it serves (`serving/server/launch.py`), and check-repo verifies that it is in the
repository and agrees with the text model.

The text model has no warm-up request: Triton loads models in parallel, so with BLS the id model
may not be ready while the text model warms up, and a failed warm-up fails the load.

Batching: dynamic, one instance by default. Running the ONNX itself, its queue delay is the id
model's (`max_queue_delay_us`), its batcher being the only one on the path. With BLS it has no
queue delay of its own: the id model's batcher already waits up to its `max_queue_delay_us` for
a fuller batch, so a delay here would make a batch wait twice; one instance forms the largest
batches (the texts that queue while it runs), so each text costs the fewest BLS round trips. On
the 2-core reference machine (`benchmarks/text_serving.py`) two instances, or the id model's
500 µs delay here too, gave lower text throughput at concurrency 16 with BLS.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx
from tritonclient.grpc import model_config_pb2 as mc

from attndeploy.echo import echo
from attndeploy.errors import ConfigError, RepositoryError
from attndeploy.jsonread import parse_json
from attndeploy.output_set import write_files
from attndeploy.runtime.contract import (
    CONTRACT_VERSION,
    PARAM_CONTRACT_VERSION,
    PARAM_LABEL_NAMES,
    wire_fields,
)
from attndeploy.runtime.families import runtime_part
from attndeploy.runtime.names import META_TOKENIZER
from attndeploy.runtime.shipping import (
    TOKENIZER_TYPES,
    MissingTokenizerPackage,
    ShippedModule,
    UnknownTokenizerType,
    family_runtime_shipment,
    runtime_sources,
    tokenizer_from_record,
)
from attndeploy.serving.packaging import model_config as cfgmod
from attndeploy.serving.packaging.onnx_info import ModelInfo
from attndeploy.serving.packaging.text_model_names import (  # noqa: F401  (re-exported)
    CALL_BLS,
    CALL_ONNXRUNTIME,
    FAMILY_RUNTIME_FILE,
    ID_MODEL_CALLS,
    PARAM_ID_MODEL,
    PARAM_ID_MODEL_CALL,
    PARAM_ID_VERSION,
    PARAM_MAX_TEXT_BYTES,
    PARAM_TAG_IDS,
    PARAM_TRUNCATE,
    TEXT,
    TEXT_SUFFIX,
    TOKENIZER_FILE,
)


@dataclass(frozen=True)
class TextTensor:
    """One input or output of a text model as Triton's config states it (batch implicit)."""

    name: str
    triton_type: str  # `model_config_pb2.DataType` name
    dims: tuple[int, ...]
    doc: str = ""

    @property
    def triton_dims(self) -> list[int]:
        return list(self.dims)


@dataclass(frozen=True)
class TextInterface:
    """The inputs and outputs of a text model (duck-compatible with `ModelInterface` for
    `signature.config_mismatches`)."""

    inputs: tuple[TextTensor, ...]
    outputs: tuple[TextTensor, ...]

    @property
    def output_names(self) -> list[str]:
        return [spec.name for spec in self.outputs]


_CONFIG_TYPES = {"BYTES": "TYPE_STRING", "FP32": "TYPE_FP32"}  # wire datatype -> config's


def text_interface(*, head: str, num_labels: int, gated: bool) -> TextInterface:
    """The text model's interface for an id model with this head (its family's key), label
    count and gates: its outputs are the prediction contract's (`contract.wire_fields`:
    `tokens`, the family's fields as its runtime part declares them, `attended`), in order.
    ValueError naming the valid heads for an unknown one."""
    try:
        family = runtime_part(head)
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    inputs = (TextTensor(TEXT, "TYPE_STRING", (1,), "one UTF-8 text per row"),)
    outputs = tuple(TextTensor(field.name, _CONFIG_TYPES[field.datatype], field.dims, field.doc)
                    for field in wire_fields(family, num_labels=num_labels, gated=gated))
    return TextInterface(inputs=inputs, outputs=outputs)


def family_shipment(head: str) -> ShippedModule:
    """The family runtime part a text model of an id model with this head ships."""
    return family_runtime_shipment(runtime_part(head))


def family_runtime_record(shipped: ShippedModule) -> str:
    """The text of `FAMILY_RUNTIME_FILE`: which shipped module the text model decodes with."""
    return json.dumps({"module": shipped.name, "path": shipped.relative}) + "\n"


def text_model_name(base: str) -> str:
    return f"{base}{TEXT_SUFFIX}"


# --------------------------------------------------------------------------- the tokenizer record


def tokenizer_record(model: onnx.ModelProto, source: str = "the model") -> dict[str, Any] | None:
    """The tokenizer record in an exported model's metadata, or None when it has none (a model
    made without a vocabulary takes ids only). RepositoryError if it is corrupt."""
    raw = next((p.value for p in model.metadata_props if p.key == META_TOKENIZER), "")
    if not raw:
        return None
    record = parse_json(raw, f"{source}: metadata {META_TOKENIZER}", error=RepositoryError,
                        invalid=lambda exc: f"{source}: corrupt metadata {META_TOKENIZER} "
                                            f"({exc}).")
    if not isinstance(record, dict):
        raise RepositoryError(f"{source}: {META_TOKENIZER} must be a JSON object.")
    return record


def check_tokenizer_record(record: dict[str, Any], info: ModelInfo, source: str) -> None:
    """RepositoryError unless a served text model can load `record` (checked by loading it,
    with the class a served model uses, when its required package is importable here)."""

    try:
        tokenizer = tokenizer_from_record(record)
    except UnknownTokenizerType:
        raise RepositoryError(
            f"{source}: its tokenizer type {echo(repr(record.get('type')))} has no served text "
            f"model in this attndeploy (it serves {', '.join(sorted(TOKENIZER_TYPES))}); "
            "package with --no-text-model to write the id model alone"
        ) from None
    except MissingTokenizerPackage:
        return  # the server must have it; the served model says so at load if not
    except Exception as exc:  # the class's own message says what is wrong with the record
        raise RepositoryError(f"{source}: {META_TOKENIZER}: {exc}") from exc
    size = len(tokenizer) if hasattr(tokenizer, "__len__") else None
    if size is not None and size > info.vocab_size:
        raise RepositoryError(f"{source}: the tokenizer has {size} tokens but the model embeds "
                              f"{info.vocab_size}; re-export the model.")


# --------------------------------------------------------------------------- config and files


def text_parameters(info: ModelInfo, options: Any, id_model: str, call: str
                    ) -> dict[str, str]:
    """The parameters the generated text model.py reads (`call`: one of `ID_MODEL_CALLS`)."""
    parameters = {
        PARAM_ID_MODEL: id_model,
        PARAM_ID_VERSION: str(options.version),
        PARAM_ID_MODEL_CALL: call,
        cfgmod.PARAM_MAX_SEQ: str(cfgmod.effective_max_seq(info, options)),
        PARAM_TRUNCATE: "true" if options.truncate_text else "false",
        PARAM_MAX_TEXT_BYTES: str(options.max_text_bytes),
        cfgmod.PARAM_MAX_REQUEST_BYTES: str(options.max_request_bytes),
        cfgmod.PARAM_HEAD: info.head,
        cfgmod.PARAM_GATED: "true" if info.gated else "false",
        cfgmod.PARAM_NUM_LABELS: str(info.num_labels),
        PARAM_CONTRACT_VERSION: str(CONTRACT_VERSION),
        PARAM_LABEL_NAMES: json.dumps(list(info.labels), ensure_ascii=False),
    }
    if info.decodes_tags:
        parameters[PARAM_TAG_IDS] = "true"
    if call == CALL_ONNXRUNTIME:
        parameters[cfgmod.PARAM_ORT_THREADS] = str(options.threads)
    if options.execution_env is not None:
        parameters[cfgmod.PARAM_EXECUTION_ENV] = str(options.execution_env.resolve())
    return parameters


def text_call(options: Any, *, calls_python_flavor: bool) -> str:
    """How the text model runs its id model: its ONNX in-process when that is the python
    flavour's (onnxruntime is in the server's Python then), unless `options.text_bls`."""
    return CALL_ONNXRUNTIME if calls_python_flavor and not options.text_bls else CALL_BLS


def build_text_config(info: ModelInfo, options: Any, *, name: str, id_model: str,
                      call: str) -> mc.ModelConfig:
    """The `ModelConfig` of text model `name` calling `id_model` (options: `PackageOptions`)."""
    cfg = mc.ModelConfig()
    cfg.name = name
    cfg.backend = cfgmod.PYTHON_BACKEND
    cfg.version_policy.specific.versions.append(options.version)
    # BLS: at most the id model's max_batch_size, one execution becomes one id-model request.
    cfg.max_batch_size = options.max_batch_size
    cfg.dynamic_batching.SetInParent()
    if call == CALL_ONNXRUNTIME:
        # This batcher is the only one on the text path: it waits as the id model's would.
        cfg.dynamic_batching.max_queue_delay_microseconds = (
            options.max_queue_delay_us if options.dynamic_batching else 0)
    else:
        # No queue delay: the texts that arrive while the instance runs form its next batch,
        # and the waiting for a fuller batch is left to the id model's batcher, which then
        # holds the text model's request anyway (waiting twice only adds latency).
        cfg.dynamic_batching.max_queue_delay_microseconds = 0
    interface = text_interface(head=info.head, num_labels=info.num_labels, gated=info.gated)
    for blocks, specs in ((cfg.input, interface.inputs), (cfg.output, interface.outputs)):
        for spec in specs:
            entry = blocks.add()
            entry.name = spec.name
            entry.data_type = mc.DataType.Value(spec.triton_type)
            entry.dims.extend(spec.triton_dims)
    group = cfg.instance_group.add()
    group.count = options.text_instances
    group.kind = mc.ModelInstanceGroup.KIND_CPU
    for key, value in text_parameters(info, options, id_model, call).items():
        cfg.parameters[key].string_value = value
    return cfg


def text_model_files(info: ModelInfo, record: dict[str, Any], version: int
                     ) -> dict[str, str | bytes]:
    """Files of a text model folder (relative path -> text or bytes), config.pbtxt excepted."""
    from attndeploy.serving.packaging.model_template import generate_text_model_py

    family = family_shipment(info.head)
    files: dict[str, str | bytes] = {
        cfgmod.LABELS_FILE: cfgmod.labels_text(info),
        TOKENIZER_FILE: json.dumps(record, ensure_ascii=False) + "\n",
        FAMILY_RUNTIME_FILE: family_runtime_record(family),
        f"{version}/{cfgmod.MODEL_PY}": generate_text_model_py(),
    }
    for relative, content in runtime_sources().items():
        files[f"{version}/{relative}"] = content
    files[f"{version}/{family.relative}"] = family.content
    return files


def write_text_model(staging: Path, info: ModelInfo, record: dict[str, Any], options: Any, *,
                     name: str, id_model: str, call: str) -> None:
    """Write every file of text model `name` into the empty folder `staging`."""
    cfg = build_text_config(info, options, name=name, id_model=id_model, call=call)
    (staging / cfgmod.CONFIG_FILE).write_text(cfgmod.serialize_config(cfg), encoding="utf-8")
    write_files(staging, text_model_files(info, record, options.version))


# --------------------------------------------------------------------------- reading a repository


def id_model_of(cfg: mc.ModelConfig) -> str | None:
    """The id model a text model's config calls, or None when `cfg` is not a text model's."""
    if cfg.backend != cfgmod.PYTHON_BACKEND or PARAM_ID_MODEL not in cfg.parameters:
        return None
    return cfg.parameters[PARAM_ID_MODEL].string_value


def call_of(cfg: mc.ModelConfig) -> str:
    """How a text model's config runs its id model (`ID_MODEL_CALL`; BLS when unset)."""
    if PARAM_ID_MODEL_CALL in cfg.parameters:
        return cfg.parameters[PARAM_ID_MODEL_CALL].string_value
    return CALL_BLS


def is_text_config(cfg: mc.ModelConfig) -> bool:
    return id_model_of(cfg) is not None


def read_config(folder: Path) -> mc.ModelConfig | None:
    """The parsed config.pbtxt of a model folder, or None if it is missing or does not parse."""
    path = folder / cfgmod.CONFIG_FILE
    try:
        return cfgmod.parse_config(path.read_text(encoding="utf-8"), str(path))
    except (OSError, UnicodeDecodeError, RepositoryError):
        return None
