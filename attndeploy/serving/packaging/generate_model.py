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

A translation export (a folder with `encoder_model.onnx` and `decoder_model.onnx`, family
"translation") is served the same way: `text_input` is the source sentence, the answer streams
its translation. Both graphs are copied beside `model.py`, and the shipped copies add the
encoder-decoder's modules (`TRANSLATION_MODULES`: `generation.seq2seq_serve` runs the encoder at
admission, see `generation.batching`). Its extra optional input `num_beams` INT32 [1] must be 1:
beam search is not served (one INVALID_ARG says so; `attndeploy generate --num-beams` beams in
process). Its caps: MAX_PROMPT_TOKENS the model's `max_source` (the source with its `</s>`),
MAX_TOKENS its `max_target`.

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
    ("attndeploy.runtime.sessions", "attndeploy/runtime/sessions.py"),
    ("attndeploy.generation", "attndeploy/generation/__init__.py"),
    ("attndeploy.generation.metadata", "attndeploy/generation/metadata.py"),
    ("attndeploy.generation.sampling", "attndeploy/generation/sampling.py"),
    ("attndeploy.generation.text_stream", "attndeploy/generation/text_stream.py"),
    ("attndeploy.generation.hf_tokenizer", "attndeploy/generation/hf_tokenizer.py"),
    ("attndeploy.generation.tokenizer", "attndeploy/generation/tokenizer.py"),
    ("attndeploy.generation.loop", "attndeploy/generation/loop.py"),
    ("attndeploy.generation.batching", "attndeploy/generation/batching.py"),
)
FAMILY_DECODER, FAMILY_TRANSLATION = "text-generation", "translation"
# A translation model's extra modules (after the decoder's: they import batching).
TRANSLATION_MODULES: tuple[tuple[str, str], ...] = (
    ("attndeploy.generation.seq2seq", "attndeploy/generation/seq2seq.py"),
    ("attndeploy.generation.seq2seq_onnx", "attndeploy/generation/seq2seq_onnx.py"),
    ("attndeploy.generation.seq2seq_serve", "attndeploy/generation/seq2seq_serve.py"),
)
TRANSLATION_FILES = ("encoder_model.onnx", "decoder_model.onnx")
NUM_BEAMS = "num_beams"


def shipped_modules(family: str = FAMILY_DECODER) -> tuple[tuple[str, str], ...]:
    """(module, relative path) of every module a generate model of `family` imports."""
    return GENERATE_MODULES + (TRANSLATION_MODULES if family == FAMILY_TRANSLATION else ())


@dataclass(frozen=True)
class TranslationSource:
    """What packaging reads of a translation export folder (`read_translation_source`)."""

    folder: Path
    variant: str
    max_source: int
    max_target: int
    tokenizer_type: str


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


def generate_sources(family: str = FAMILY_DECODER) -> dict[str, bytes]:
    """{relative path: bytes} of every shipped module of `family`, from this installation."""
    root = resources.files("attndeploy")
    return {relative: root.joinpath(*relative.split("/")[1:]).read_bytes()
            for _, relative in shipped_modules(family)}


def read_translation_source(folder: Path) -> TranslationSource:
    """A translation export folder's packaging facts; RepositoryError if it cannot be served."""
    import json

    from attndeploy.generation.metadata import (
        META_FAMILY,
        META_GENERATION,
        META_TOKENIZER,
        META_VARIANT,
    )
    from attndeploy.serving.packaging.onnx_info import load_onnx_graph

    decoder = load_onnx_graph(folder / TRANSLATION_FILES[1])
    meta = {p.key: p.value for p in decoder.metadata_props}
    if meta.get(META_FAMILY) != FAMILY_TRANSLATION:
        raise RepositoryError(f"{folder}: not a translation export (family "
                              f"{meta.get(META_FAMILY)!r})")
    if "decoder_attention_mask" not in {i.name for i in decoder.graph.input}:
        raise RepositoryError(f"{folder} was exported before translations could be served (its "
                              "decoder has no decoder_attention_mask): re-export the checkpoint "
                              "with `attndeploy export`")
    try:
        generation = json.loads(meta[META_GENERATION])
        tokenizer = json.loads(meta[META_TOKENIZER])
        return TranslationSource(folder, meta.get(META_VARIANT, "?"),
                                 int(generation["max_source"]), int(generation["max_target"]),
                                 str(tokenizer["type"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise RepositoryError(f"{folder}: unreadable translation metadata ({exc})") from None


def _checked_caps(prompt: int, new: int, prompt_max: int, new_max: int, what: str
                  ) -> tuple[int, int]:
    for name, value, most in (("max_seq (the prompt cap)", prompt, prompt_max),
                              ("max_new_tokens", new, new_max)):
        if not 1 <= value <= most:
            raise RepositoryError(f"{name} {value} must be in 1..{most} ({what})")
    return prompt, new


def generate_limits(meta: DecoderMetadata | TranslationSource, options: Any) -> dict[str, int]:
    """The caps the served model enforces (RepositoryError if an option exceeds the model)."""
    if isinstance(meta, TranslationSource):
        prompt, new = _checked_caps(
            options.max_seq if options.max_seq is not None else meta.max_source,
            options.max_new_tokens if options.max_new_tokens is not None else meta.max_target,
            meta.max_source, meta.max_target,
            f"the model reads {meta.max_source} source and writes {meta.max_target} target "
            "tokens")
    else:
        context = meta.max_seq
        prompt, new = _checked_caps(
            options.max_seq if options.max_seq is not None else context - 1,
            options.max_new_tokens if options.max_new_tokens is not None else context - 1,
            context - 1, context - 1, f"the model's context is {context} tokens")
    return {PARAM_MAX_PROMPT_TOKENS: prompt, PARAM_MAX_TOKENS: new,
            PARAM_MAX_PROMPT_BYTES: options.max_text_bytes,
            PARAM_MAX_RUNNING: options.max_batch_size}


def generate_parameters(meta: DecoderMetadata | TranslationSource, options: Any
                        ) -> dict[str, str]:
    parameters = {key: str(value) for key, value in generate_limits(meta, options).items()}
    if isinstance(meta, TranslationSource):
        parameters[PARAM_GENERATE] = FAMILY_TRANSLATION
        parameters[PARAM_TOKENIZER] = meta.tokenizer_type
    else:
        parameters[PARAM_GENERATE] = FAMILY_DECODER
        if meta.tokenizer:
            parameters[PARAM_TOKENIZER] = str(meta.tokenizer.get("type"))
    parameters[cfgmod.PARAM_ORT_THREADS] = str(options.threads)
    if options.execution_env is not None:
        parameters[cfgmod.PARAM_EXECUTION_ENV] = str(options.execution_env.resolve())
    return parameters


def build_generate_config(meta: DecoderMetadata | TranslationSource, options: Any, *,
                          name: str) -> mc.ModelConfig:
    """The `ModelConfig` of generate model `name` (options: `PackageOptions`)."""
    cfg = mc.ModelConfig()
    cfg.name = name
    cfg.backend = cfgmod.PYTHON_BACKEND
    cfg.version_policy.specific.versions.append(options.version)
    cfg.max_batch_size = 0  # one prompt per request: sequences are batched by the model
    cfg.model_transaction_policy.decoupled = True
    inputs = INPUTS + ((Field(NUM_BEAMS, "TYPE_INT32", (1,), True),)
                       if isinstance(meta, TranslationSource) else ())
    for blocks, fields in ((cfg.input, inputs), (cfg.output, OUTPUTS)):
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


def generate_model_py(family: str = FAMILY_DECODER) -> str:
    """The full text of a generate model's `model.py` (of `family`) for this attndeploy
    version."""
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
        "SAMPLING": (TEMPERATURE, TOP_K, TOP_P, SEED), "NUM_BEAMS": NUM_BEAMS,
        "FAMILY": family, "FAMILY_TRANSLATION": FAMILY_TRANSLATION,
        "TEXT_OUTPUT": TEXT_OUTPUT, "TOKEN_IDS": TOKEN_IDS, "FINISH_REASON": FINISH_REASON,
        "SHIPPED_MODULES": [list(entry) for entry in shipped_modules(family)],
    })


def write_generate_model(staging: Path, onnx_path: Path,
                         meta: DecoderMetadata | TranslationSource, options: Any,
                         *, name: str) -> None:
    """Write every file of generate model `name` into the empty folder `staging` (a decoder's
    `onnx_path` is its file; a translation's, its export folder)."""
    import shutil

    family = FAMILY_TRANSLATION if isinstance(meta, TranslationSource) else FAMILY_DECODER
    cfg = build_generate_config(meta, options, name=name)
    (staging / cfgmod.CONFIG_FILE).write_text(cfgmod.serialize_config(cfg), encoding="utf-8")
    version = str(options.version)
    files: dict[str, str | bytes] = {f"{version}/{cfgmod.MODEL_PY}": generate_model_py(family)}
    for relative, content in generate_sources(family).items():
        files[f"{version}/{relative}"] = content
    write_files(staging, files)
    if family == FAMILY_TRANSLATION:
        for graph in TRANSLATION_FILES:
            shutil.copyfile(Path(onnx_path) / graph, staging / version / graph)
    else:
        shutil.copyfile(onnx_path, staging / version / cfgmod.MODEL_FILE)


def served_generate_source(repo: Path, model: str) -> Path | None:
    """The in-process twin of served generate model `model`: its newest version's
    `model.onnx` (a decoder) or the version folder itself (a translation's two graphs)."""
    folder = Path(repo) / model
    versions = sorted((int(p.name), p) for p in folder.glob("*")
                      if p.is_dir() and p.name.isdigit()) if folder.is_dir() else []
    for _, version in reversed(versions):
        if (version / cfgmod.MODEL_FILE).is_file():
            return version / cfgmod.MODEL_FILE
        if all((version / name).is_file() for name in TRANSLATION_FILES):
            return version
    return None


def generate_family(cfg: mc.ModelConfig) -> str:
    """The family a generate model serves (its GENERATE parameter)."""
    return cfg.parameters[PARAM_GENERATE].string_value or FAMILY_DECODER


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
    family = generate_family(cfg)
    expected_py = generate_model_py(family)
    for version in versions:
        folder = model.path / str(version)
        onnx_path = folder / cfgmod.MODEL_FILE
        if family == FAMILY_TRANSLATION:
            _check_translation_graphs(model, folder, version)
        elif not onnx_path.is_file():
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
        for relative, content in generate_sources(family).items():
            copy = folder / relative
            if not copy.is_file():
                model.error(f"{version}/{relative} is missing (the generation loop's code); "
                            "re-package the model")
            elif copy.read_bytes() != content:
                model.error(f"{version}/{relative} differs from this attndeploy's {relative}; "
                            "re-package the model to copy it again")


def _check_translation_graphs(model: Any, folder: Path, version: int) -> None:
    """check-repo's findings for a translation model's two graphs."""
    missing = [name for name in TRANSLATION_FILES if not (folder / name).is_file()]
    if missing:
        model.error(f"{version}/{', '.join(missing)} missing (a translation model needs "
                    f"{' and '.join(TRANSLATION_FILES)})")
        return
    try:
        read_translation_source(folder)
    except Exception as exc:  # a broken file is a finding, not a crash
        model.error(f"{version}: {exc}")
