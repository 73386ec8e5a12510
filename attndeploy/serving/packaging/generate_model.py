"""The generate model `<name>_generate`: a decoder served as token streams (issue #50).

`attndeploy package` of a text-generation export (its metadata's `attndeploy.family`) writes
this one model (the raw graph with its cache inputs is no use to a client alone):

```
<name>_generate/config.pbtxt       python backend, decoupled; the fields below; no batcher
<name>_generate/<v>/model.onnx     the exported decoder, byte for byte
<name>_generate/<v>/model.py       generated from templates/generate_model.py.tmpl
<name>_generate/<v>/attndeploy/    byte-for-byte copies of GENERATE_MODULES: the loop
                                   (`generation.loop`), the continuous batcher
                                   (`generation.batching`), sampling, the tokenizer
```

Interface (`max_batch_size` 0: one prompt per request; the model batches sequences itself):
inputs `text_input` BYTES [1], optional `max_tokens` INT32 [1], `temperature` FP32 [1],
`top_k` INT32 [1], `top_p` FP32 [1], `seed` INT64 [1], `stop` BYTES [1], `stream` BOOL [1];
outputs `text_output` BYTES [1], `token_ids` INT64 [-1], `finish_reason` BYTES [1]. The
template's docstring says what each response holds. Parameters: MAX_RUNNING (the largest
running batch: `PackageOptions.max_batch_size`), MAX_PROMPT_TOKENS (`max_seq` when given, else
the model's context less one), MAX_PROMPT_BYTES (`max_text_bytes`), MAX_TOKENS (`max_new_tokens`
when given, else the model's context less one), ORT_THREADS (`threads`), and GENERATE (marks
the model for check-repo; its value is the ONNX file's family).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from attndeploy.errors import RepositoryError
from attndeploy.generation.metadata import DecoderMetadata
from attndeploy.output_set import write_files
from attndeploy.serving.packaging import model_config as cfgmod

GENERATE_SUFFIX = "_generate"
GENERATE_TEMPLATE_RESOURCE = "generate_model.py.tmpl"
DEFAULT_MAX_TOKENS = 16  # vLLM's default when a request names none

TEXT_INPUT, MAX_TOKENS, TEMPERATURE, TOP_K, TOP_P, SEED, STOP, STREAM = (
    "text_input", "max_tokens", "temperature", "top_k", "top_p", "seed", "stop", "stream")
TEXT_OUTPUT, TOKEN_IDS, FINISH_REASON = "text_output", "token_ids", "finish_reason"

PARAM_GENERATE = "GENERATE"  # marks a generate model (its value: the export's family)
PARAM_MAX_RUNNING = "MAX_RUNNING"
PARAM_MAX_PROMPT_TOKENS = "MAX_PROMPT_TOKENS"
PARAM_MAX_PROMPT_BYTES = "MAX_PROMPT_BYTES"
PARAM_MAX_TOKENS = "MAX_TOKENS"
PARAM_TOKENIZER = "TOKENIZER"  # the export's tokenizer type: what the server's Python must run
# Tokenizer types whose served loop needs a package beyond numpy (deploy's server image installs
# it): a pretrained decoder's tokenizer.json runs in `tokenizers`.
TOKENIZER_PACKAGES = {"hf-tokenizer": "tokenizers"}

# Every module the served loop imports, each one's imports first (the package `__init__`s
# before their submodules). tests/serving/test_generate_model.py checks that every attndeploy
# import of these files is listed.
GENERATE_MODULES: tuple[tuple[str, str], ...] = (
    ("attndeploy", "attndeploy/__init__.py"),
    ("attndeploy.errors", "attndeploy/errors.py"),
    ("attndeploy.runtime", "attndeploy/runtime/__init__.py"),
    ("attndeploy.runtime.tokenizer", "attndeploy/runtime/tokenizer.py"),
    ("attndeploy.generation", "attndeploy/generation/__init__.py"),
    ("attndeploy.generation.metadata", "attndeploy/generation/metadata.py"),
    ("attndeploy.generation.sampling", "attndeploy/generation/sampling.py"),
    ("attndeploy.generation.text_stream", "attndeploy/generation/text_stream.py"),
    ("attndeploy.generation.hf_tokenizer", "attndeploy/generation/hf_tokenizer.py"),
    ("attndeploy.generation.tokenizer", "attndeploy/generation/tokenizer.py"),
    ("attndeploy.generation.loop", "attndeploy/generation/loop.py"),
    ("attndeploy.generation.batching", "attndeploy/generation/batching.py"),
)


@dataclass(frozen=True)
class Field:
    name: str
    triton_type: str
    dims: tuple[int, ...]
    optional: bool = False


INPUTS = (
    Field(TEXT_INPUT, "TYPE_STRING", (1,)),
    Field(MAX_TOKENS, "TYPE_INT32", (1,), True),
    Field(TEMPERATURE, "TYPE_FP32", (1,), True),
    Field(TOP_K, "TYPE_INT32", (1,), True),
    Field(TOP_P, "TYPE_FP32", (1,), True),
    Field(SEED, "TYPE_INT64", (1,), True),
    Field(STOP, "TYPE_STRING", (1,), True),
    Field(STREAM, "TYPE_BOOL", (1,), True),
)
OUTPUTS = (
    Field(TEXT_OUTPUT, "TYPE_STRING", (1,)),
    Field(TOKEN_IDS, "TYPE_INT64", (-1,)),
    Field(FINISH_REASON, "TYPE_STRING", (1,)),
)


def generate_model_name(base: str) -> str:
    return f"{base}{GENERATE_SUFFIX}"


def generate_sources() -> dict[str, bytes]:
    """{relative path: bytes} of every file in `GENERATE_MODULES`, from this installation."""
    root = resources.files("attndeploy")
    return {relative: root.joinpath(*relative.split("/")[1:]).read_bytes()
            for _, relative in GENERATE_MODULES}


def generate_limits(meta: DecoderMetadata, options: Any) -> dict[str, int]:
    """The caps the served model enforces (RepositoryError if an option exceeds the model)."""
    context = meta.max_seq
    prompt = options.max_seq if options.max_seq is not None else context - 1
    new = options.max_new_tokens if options.max_new_tokens is not None else context - 1
    for what, value in (("max_seq (the prompt cap)", prompt), ("max_new_tokens", new)):
        if not 1 <= value < context:
            raise RepositoryError(f"{what} {value} must be in 1..{context - 1} (the model's "
                                  f"context is {context} tokens)")
    return {PARAM_MAX_PROMPT_TOKENS: prompt, PARAM_MAX_TOKENS: new,
            PARAM_MAX_PROMPT_BYTES: options.max_text_bytes,
            PARAM_MAX_RUNNING: options.max_batch_size}


def generate_parameters(meta: DecoderMetadata, options: Any) -> dict[str, str]:
    parameters = {key: str(value) for key, value in generate_limits(meta, options).items()}
    parameters[PARAM_GENERATE] = "text-generation"
    if meta.tokenizer:
        parameters[PARAM_TOKENIZER] = str(meta.tokenizer.get("type"))
    parameters[cfgmod.PARAM_ORT_THREADS] = str(options.threads)
    if options.execution_env is not None:
        parameters[cfgmod.PARAM_EXECUTION_ENV] = str(options.execution_env.resolve())
    return parameters


def build_generate_config(meta: DecoderMetadata, options: Any, *, name: str) -> mc.ModelConfig:
    """The `ModelConfig` of generate model `name` (options: `PackageOptions`)."""
    cfg = mc.ModelConfig()
    cfg.name = name
    cfg.backend = cfgmod.PYTHON_BACKEND
    cfg.version_policy.specific.versions.append(options.version)
    cfg.max_batch_size = 0  # one prompt per request: sequences are batched by the model
    cfg.model_transaction_policy.decoupled = True
    for blocks, fields in ((cfg.input, INPUTS), (cfg.output, OUTPUTS)):
        for spec in fields:
            entry = blocks.add()
            entry.name = spec.name
            entry.data_type = mc.DataType.Value(spec.triton_type)
            entry.dims.extend(spec.dims)
            if spec.optional:
                entry.optional = True
    group = cfg.instance_group.add()
    group.count = 1  # one batcher: a second instance would split the running batch
    group.kind = mc.ModelInstanceGroup.KIND_CPU
    for key, value in generate_parameters(meta, options).items():
        cfg.parameters[key].string_value = value
    return cfg


def generate_model_py() -> str:
    """The full text of a generate model's `model.py` for this attndeploy version."""
    from attndeploy.serving.packaging.model_template import _generate

    return _generate(GENERATE_TEMPLATE_RESOURCE, {
        "MODEL_FILE": cfgmod.MODEL_FILE,
        "PARAM_ORT_THREADS": cfgmod.PARAM_ORT_THREADS,
        "PARAM_MAX_RUNNING": PARAM_MAX_RUNNING,
        "PARAM_MAX_PROMPT_TOKENS": PARAM_MAX_PROMPT_TOKENS,
        "PARAM_MAX_PROMPT_BYTES": PARAM_MAX_PROMPT_BYTES,
        "PARAM_MAX_TOKENS": PARAM_MAX_TOKENS,
        "DEFAULT_MAX_TOKENS": DEFAULT_MAX_TOKENS,
        "TEXT_INPUT": TEXT_INPUT, "MAX_TOKENS": MAX_TOKENS, "STOP": STOP, "STREAM": STREAM,
        "SAMPLING": (TEMPERATURE, TOP_K, TOP_P, SEED),
        "TEXT_OUTPUT": TEXT_OUTPUT, "TOKEN_IDS": TOKEN_IDS, "FINISH_REASON": FINISH_REASON,
        "SHIPPED_MODULES": [list(entry) for entry in GENERATE_MODULES],
    })


def write_generate_model(staging: Path, onnx_path: Path, meta: DecoderMetadata, options: Any,
                         *, name: str) -> None:
    """Write every file of generate model `name` into the empty folder `staging`."""
    import shutil

    cfg = build_generate_config(meta, options, name=name)
    (staging / cfgmod.CONFIG_FILE).write_text(cfgmod.serialize_config(cfg), encoding="utf-8")
    version = str(options.version)
    files: dict[str, str | bytes] = {f"{version}/{cfgmod.MODEL_PY}": generate_model_py()}
    for relative, content in generate_sources().items():
        files[f"{version}/{relative}"] = content
    write_files(staging, files)
    shutil.copyfile(onnx_path, staging / version / cfgmod.MODEL_FILE)


def is_generate_config(cfg: mc.ModelConfig) -> bool:
    return cfg.backend == cfgmod.PYTHON_BACKEND and PARAM_GENERATE in cfg.parameters


def generate_model_requirement(cfg: mc.ModelConfig) -> tuple[str, str] | None:
    """(tokenizer type, Python package) when a generate model's tokenizer needs a package in the
    server's Python (`TOKENIZER_PACKAGES`); None otherwise."""
    if not is_generate_config(cfg) or PARAM_TOKENIZER not in cfg.parameters:
        return None
    kind = cfg.parameters[PARAM_TOKENIZER].string_value
    package = TOKENIZER_PACKAGES.get(kind)
    return None if package is None else (kind, package)


# --------------------------------------------------------------------------- check-repo


def check_generate_model(model: Any, cfg: mc.ModelConfig, versions: list[int]) -> None:
    """check-repo's findings for a generate model (`model`: its collector, `error(message)`):
    decoupled, its ONNX a decoder with a tokenizer, its model.py and shipped copies this
    attndeploy's (a drifted copy is refused, as a text model's)."""
    from attndeploy.echo import echo
    from attndeploy.generation.metadata import is_decoder, parse_decoder_metadata
    from attndeploy.serving.packaging.model_template import parse_header, template_digest
    from attndeploy.serving.packaging.onnx_info import load_onnx_graph

    if not cfg.model_transaction_policy.decoupled:
        model.error("a generate model must be decoupled (model_transaction_policy { decoupled: "
                    "true }): it answers a request with many responses")
    expected_py = generate_model_py()
    for version in versions:
        folder = model.path / str(version)
        onnx_path = folder / cfgmod.MODEL_FILE
        if not onnx_path.is_file():
            model.error(f"{version}/{cfgmod.MODEL_FILE} is missing")
        else:
            try:
                proto = load_onnx_graph(onnx_path)
                meta = {p.key: p.value for p in proto.metadata_props}
                if not is_decoder(meta):
                    model.error(f"{version}/{cfgmod.MODEL_FILE} is not a text-generation export")
                elif parse_decoder_metadata(meta, str(onnx_path)).tokenizer is None:
                    model.error(f"{version}/{cfgmod.MODEL_FILE} has no tokenizer")
            except Exception as exc:  # a broken file is a finding, not a crash
                model.error(f"{version}/{cfgmod.MODEL_FILE}: {exc}")
        where = f"{version}/{cfgmod.MODEL_PY}"
        path = folder / cfgmod.MODEL_PY
        if not path.is_file():
            model.error(f"{where} is missing (generate model)")
        else:
            text = path.read_text(encoding="utf-8", errors="replace")
            if text != expected_py:
                header = parse_header(text)
                digest = template_digest(GENERATE_TEMPLATE_RESOURCE)
                if header is None:
                    model.error(f"{where} was not generated by attndeploy; re-package the model")
                elif header.digest != digest:
                    model.error(f"{where} was generated by attndeploy {echo(header.version)} "
                                f"(template {echo(header.digest)}), not by this version "
                                f"(template {digest}); re-package")
                else:
                    model.error(f"{where} was edited by hand; re-package the model to "
                                "regenerate it")
        for relative, content in generate_sources().items():
            copy = folder / relative
            if not copy.is_file():
                model.error(f"{version}/{relative} is missing (the generation loop's code); "
                            "re-package the model")
            elif copy.read_bytes() != content:
                model.error(f"{version}/{relative} differs from this attndeploy's {relative}; "
                            "re-package the model to copy it again")
