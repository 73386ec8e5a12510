"""How to package a model for Triton: `PackageOptions`, validated on construction.

Re-exported by `attndeploy.serving.packaging.repository`; kept apart so that `model_config.py` can
use it without importing the packager. The `Enum` choices suit a Typer CLI option as they are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from attndeploy.errors import RepositoryError
from attndeploy.runtime import DEFAULT_MAX_TEXT_BYTES

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
# Longest model name: a folder name, plus `_onnxruntime` with both flavours and the staging
# folder's `.<name>.<pid>.<random>.tmp`, must stay under the 255-byte limit of file systems.
MAX_NAME_LENGTH = 128


class Flavor(str, Enum):
    """Which model(s) to write: `python` (generated model.py running onnxruntime in-process; what
    the local server runs), `onnxruntime` (`platform: "onnxruntime_onnx"`, for NGC Triton
    containers and GPUs) or `both` (named `<name>_python` and `<name>_onnxruntime`)."""

    PYTHON = "python"
    ONNXRUNTIME = "onnxruntime"
    BOTH = "both"


class Kind(str, Enum):
    """Where model instances run (Triton `instance_group.kind`)."""

    CPU = "cpu"
    GPU = "gpu"


def _enum(cls: type[Enum], value: object, what: str) -> Enum:
    try:
        return cls(value)
    except ValueError:
        valid = ", ".join(member.value for member in cls)
        raise RepositoryError(f"unknown {what} {value!r}; valid: {valid}") from None


def _check_name(name: str) -> None:
    if not name:
        raise RepositoryError("the model name is empty; give a name, or none for the default one")
    if len(name) > MAX_NAME_LENGTH:
        raise RepositoryError(
            f"model name {name[:24]}... is {len(name)} characters long; use at most "
            f"{MAX_NAME_LENGTH}"
        )
    if not _NAME.fullmatch(name):
        raise RepositoryError(
            f"model name {name!r} must start with a letter or digit and contain only "
            "letters, digits, '_', '.' and '-'."
        )


# The largest request (all its input tensors, in bytes) a python-flavour model reads: id,
# generic and text models refuse a larger one with INVALID_ARG before any other work.
DEFAULT_MAX_REQUEST_BYTES = 16 * 1024 * 1024

# Where `package` writes and `serve`, `infer`, `loadtest`, `check-repo` and `deploy` read.
DEFAULT_REPOSITORY = Path("model_repository")


def default_model_name(source: Path) -> str:
    """A checkpoint directory's name; for an ONNX file its stem (its folder's name if 'model')."""
    source = Path(source).resolve()
    if source.is_dir():
        return source.name
    return source.parent.name if source.stem == "model" else source.stem


@dataclass(frozen=True)
class PackageOptions:
    """Options of `package_model`.

    - `flavor`: see `Flavor`. With `both`, the two models are `<name>_python` and
      `<name>_onnxruntime`; with one flavour the model is named `<name>` exactly.
    - `name`: model name; default `default_model_name(source)` (a checkpoint directory's name,
      an ONNX file's stem, or its folder's name for `model.onnx`). At most `MAX_NAME_LENGTH`
      characters: letters, digits, '_', '.' and '-'; never empty.
    - `version`: the version folder written (the config serves exactly this version).
    - `max_batch_size`: Triton's largest batch (sum of the batch dims of one execution).
    - `instances`: model instances (`instance_group.count`).
    - `kind`: `cpu` or `gpu`. `gpu` applies to the onnxruntime flavour only; the python flavour
      runs onnxruntime's CPU provider in-process, so `flavor=python, kind=gpu` is refused and
      `flavor=both, kind=gpu` gives the python model CPU instances.
    - `dynamic_batching`, `max_queue_delay_us`: Triton's dynamic batcher and how long it may hold
      a request to form a larger batch. A lone request always waits the whole delay (at
      concurrency 1 the p50 is the ~2 ms gRPC plus python-backend overhead plus the delay),
      while under load the queue fills during each execution and batches form even with no
      delay. 500 µs by default, with `max_batch_size` 8 and one instance: on the 2-core
      reference machine (`benchmarks/serving.py`, which sweeps 0-2000 µs, batch 8/16/32 and 2
      instances) it keeps concurrency 16 at >= 2.5x the throughput of concurrency 1 and the
      concurrency-1 p50 within 3 ms of in-process onnxruntime, with similar margin on both;
      100-250 µs fall short of 2.5x in some runs, 1000 µs and more near or break the 3 ms.
    - `warmup`: one warm-up request (batch 1, seq 8 or `max_seq` if smaller) per model.
    - `force`: replace an existing model folder (else RepositoryError naming it).
    - `threads`: onnxruntime intra-op threads (`ORT_THREADS` of the python flavour,
      `intra_op_thread_count` of the onnxruntime backend).
    - `max_seq`: the longest request the python flavour accepts; default (None) the model's own
      `max_seq` from the ONNX metadata. It may lower that limit, never raise it.
    - `execution_env`: optional python environment directory for the python backend stub
      (`EXECUTION_ENV_PATH`); left out by default because `attndeploy.serving.server` puts the
      current environment's `bin/` first on the server's PATH.
    - `text`: also write the text model `<name>_text` (raw text in, label out; see
      `attndeploy.serving.packaging.text_model`) when the model's metadata holds a tokenizer. It
      calls the python flavour when that is written, else the onnxruntime one.
    - `text_bls`: the text model calls its id model through the server (BLS) even when that is
      the python flavour, whose ONNX file it otherwise loads and runs in its own process (with
      `threads`, `max_queue_delay_us` and `max_batch_size` as the id model's). Off by default:
      the second hop costs a text model about 12 % of its throughput at concurrency 16
      (`benchmarks/text_serving.py`); BLS merges text and id requests in one batcher and holds
      the weights once. A text model calling the onnxruntime flavour always uses BLS.
    - `truncate_text`: the text model keeps the first `max_seq` tokens of a longer text instead
      of refusing it (off by default: a cut text is a different text).
    - `text_instances`: instances of the text model. One by default: it batches the texts that
      arrive while it runs, so each batch is as large as the load makes it (see
      `text_model.py`, "Batching").
    - `max_text_bytes`: the text model refuses a text of more UTF-8 bytes (INVALID_ARG) before
      decoding or tokenizing it; 64 KiB by default (`attndeploy.runtime.DEFAULT_MAX_TEXT_BYTES`,
      the in-process runtime's limit too). A single huge "word" is one token, so max_seq alone
      does not bound the work.
    - `max_request_bytes`: the text model (all the texts of a request) and the python flavour of a
      generic model (all its input tensors) refuse a larger request before any other work; 16 MiB
      by default. An id model needs no such limit: it refuses seq > max_seq and Triton refuses
      batch > max_batch_size, which bounds a request to max_batch_size * max_seq * 16 bytes.
      Triton has read the request by then: a fronting proxy's body-size limit keeps it from
      reaching the server at all.
    - A decoder (a text-generation export) is packaged as `<name>_generate` alone
      (`generate_model.py`): `max_batch_size` is its largest running batch of sequences,
      `max_seq` its prompt cap in tokens, `max_text_bytes` in bytes, `max_new_tokens` the cap on
      a request's `max_tokens` (default, like `max_seq`'s: the model's context less one),
      `threads` onnxruntime's.
    """

    flavor: Flavor | str = Flavor.PYTHON
    name: str | None = None
    version: int = 1
    max_batch_size: int = 8
    instances: int = 1
    kind: Kind | str = Kind.CPU
    dynamic_batching: bool = True
    max_queue_delay_us: int = 500
    warmup: bool = True
    force: bool = False
    threads: int = 1
    max_seq: int | None = None
    execution_env: Path | None = None
    text: bool = True
    truncate_text: bool = False
    text_bls: bool = False
    text_instances: int = 1
    max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    max_new_tokens: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "flavor", _enum(Flavor, self.flavor, "flavor"))
        object.__setattr__(self, "kind", _enum(Kind, self.kind, "instance kind"))
        if self.name is not None:
            _check_name(self.name)
        for field_name in ("version", "max_batch_size", "instances", "threads",
                           "text_instances", "max_text_bytes", "max_request_bytes"):
            value = getattr(self, field_name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise RepositoryError(f"{field_name} must be an integer >= 1, got {value!r}.")
        if self.max_queue_delay_us < 0:
            raise RepositoryError(
                f"max_queue_delay_us must be >= 0, got {self.max_queue_delay_us}."
            )
        if self.max_seq is not None and self.max_seq < 1:
            raise RepositoryError(f"max_seq must be >= 1, got {self.max_seq}.")
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise RepositoryError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}.")
        if self.max_text_bytes > self.max_request_bytes:
            raise RepositoryError(
                f"max_text_bytes ({self.max_text_bytes}) exceeds max_request_bytes "
                f"({self.max_request_bytes}): a request of one such text would be refused."
            )
        if self.flavor is Flavor.PYTHON and self.kind is Kind.GPU:
            raise RepositoryError(
                "the python flavour runs onnxruntime on the CPU inside the python backend; "
                "use flavor onnxruntime (or both) for GPU instances."
            )
        if self.execution_env is not None:
            object.__setattr__(self, "execution_env", Path(self.execution_env))

    def flavors(self) -> list[Flavor]:
        """The concrete flavours to write (`both` expanded, python first)."""
        if self.flavor is Flavor.BOTH:
            return [Flavor.PYTHON, Flavor.ONNXRUNTIME]
        return [Flavor(self.flavor)]

    def model_name(self, base: str, flavor: Flavor) -> str:
        """The Triton model name of `flavor` for base name `base`."""
        return f"{base}_{flavor.value}" if self.flavor is Flavor.BOTH else base

    def kind_for(self, flavor: Flavor) -> Kind:
        """The instance kind of `flavor` (the python flavour is always CPU)."""
        return Kind.CPU if flavor is Flavor.PYTHON else Kind(self.kind)
