"""What is tuned: `read_target` finds the named model in a repository, the id model whose ONNX
runs (the model itself, or the text model's: run in its own process, or called by BLS) and an
optional int8 file.

A text model is tuned with the model that runs its ONNX; the load drives the text model. One
that runs the id model's ONNX itself (`ID_MODEL_CALL` onnxruntime, the default) is that model:
its own batching, instances and threads are tuned, and the id model keeps its config (an int8
candidate changes only which version it serves, the file the text model loads). One that calls
the id model by BLS is tuned together with it: both configs change (the id model's batching,
instances and threads; the text model's instances and queue delay, its `max_batch_size` tied to
the id model's). Naming an id model tunes it alone.

Only the python flavour is tuned: the local tritonserver (the `nvidia-pytriton` wheel's) has no
onnxruntime backend, so an `onnxruntime_onnx` model cannot be measured here.

An int8 model (`--int8 PATH.onnx`, e.g. written by `attndeploy quantize`) is offered as the
`int8` precision: it must declare the same graph inputs and outputs (names, element types,
ranks) as the served ONNX; it is served as another version of the id model (`next_version`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx
from tritonclient.grpc import model_config_pb2 as mc

from attndeploy.errors import RepositoryError
from attndeploy.fsutil import file_sha256, is_staging_name
from attndeploy.runtime.names import META_QUANTIZATION  # what `attndeploy quantize` records
from attndeploy.serving.loadtest.inputs import scales_per_batch
from attndeploy.serving.packaging import model_config as cfgmod
from attndeploy.serving.packaging.onnx_info import (
    is_generic,
    load_onnx_graph,
    missing_functions,
    uses_external_data,
)
from attndeploy.serving.packaging.text_model import CALL_ONNXRUNTIME, call_of, id_model_of


@dataclass(frozen=True)
class Int8Model:
    """An int8 ONNX offered as a candidate precision."""

    path: Path
    sha256: str
    quantization: str | None  # its `attndeploy.quantization` metadata (None: not recorded)
    scaled_per_batch: bool  # its graph scales activations per batch (`scales_per_batch`)

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "sha256": self.sha256, "quantization": self.quantization,
                "scaled_per_batch": self.scaled_per_batch}


@dataclass(frozen=True)
class TuneTarget:
    """The model(s) of one tuning run, as the repository holds them now."""

    repo: Path
    model: str  # the model the load drives (a text model, or the id model itself)
    id_model: str
    text_model: str | None
    id_config: mc.ModelConfig
    text_config: mc.ModelConfig | None
    version: int  # the id model's served version
    onnx_path: Path  # the id model's (fp32) ONNX of that version
    generic: bool  # a user's model (`export --factory`): packaged from its graph
    int8: Int8Model | None = None

    @property
    def text_runs_onnx(self) -> bool:
        """A text model that runs its id model's ONNX in its own process (not by BLS)."""
        return self.text_config is not None and call_of(self.text_config) == CALL_ONNXRUNTIME

    @property
    def models(self) -> list[str]:
        """The model folders a candidate repository holds (the text model first)."""
        return [name for name in (self.text_model, self.id_model) if name is not None]

    @property
    def next_version(self) -> int:
        """The version folder an int8 model is served from: one above every existing one."""
        folder = self.repo / self.id_model
        versions = [int(p.name) for p in folder.iterdir() if p.is_dir() and p.name.isdigit()]
        return max([self.version, *versions]) + 1

    def onnx_for(self, precision: str) -> Path:
        """The ONNX file served at `precision` (the oracle of the load test's checks)."""
        if precision == "int8":
            if self.int8 is None:
                raise RepositoryError("no int8 model was offered (--int8 PATH.onnx)")
            return self.int8.path
        return self.onnx_path

    def to_dict(self) -> dict[str, Any]:
        return {"repo": str(self.repo), "model": self.model, "id_model": self.id_model,
                "text_model": self.text_model, "version": self.version,
                "onnx": str(self.onnx_path), "generic": self.generic,
                "int8": self.int8.to_dict() if self.int8 is not None else None}


def _models_in(repo: Path) -> list[str]:
    return sorted(p.name for p in repo.iterdir()
                  if p.is_dir() and not is_staging_name(p.name) and (p / cfgmod.CONFIG_FILE)
                  .is_file())


def _config(repo: Path, name: str) -> mc.ModelConfig:
    path = repo / name / cfgmod.CONFIG_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RepositoryError(f"cannot read {path}: {exc}") from exc
    return cfgmod.parse_config(text, str(path))


def _served_version(repo: Path, name: str, cfg: mc.ModelConfig) -> int:
    folder = repo / name
    present = sorted(int(p.name) for p in folder.iterdir()
                     if p.is_dir() and p.name.isdigit()
                     and (p / (cfg.default_model_filename or cfgmod.MODEL_FILE)).is_file())
    if cfg.version_policy.WhichOneof("policy_choice") == "specific":
        wanted = [v for v in cfg.version_policy.specific.versions if v in present]
        if wanted:
            return max(wanted)
    if not present:
        raise RepositoryError(f"{folder} holds no version folder with a "
                              f"{cfg.default_model_filename or cfgmod.MODEL_FILE}; re-package it")
    return present[-1]


def _signature(model: onnx.ModelProto) -> tuple[list[tuple[str, int, int]], ...]:
    """(inputs, outputs): name, element type and rank of each declared graph tensor."""
    initializers = {init.name for init in model.graph.initializer}

    def entries(values: Any) -> list[tuple[str, int, int]]:
        return [(v.name, v.type.tensor_type.elem_type, len(v.type.tensor_type.shape.dim))
                for v in values if v.name not in initializers]

    return entries(model.graph.input), entries(model.graph.output)


def read_int8(path: Path, served: Path) -> Int8Model:
    """Vet an int8 ONNX against the served one; RepositoryError naming what differs."""
    path = Path(path)
    if not path.is_file():
        raise RepositoryError(f"int8 model {path} is not a file; write one with "
                              "`attndeploy quantize MODEL.onnx --out OUT.onnx`")
    model = load_onnx_graph(path)
    if uses_external_data(model):
        raise RepositoryError(f"int8 model {path} keeps weights in external data files; save "
                              "it as one .onnx file")
    missing = missing_functions(model)
    if missing:
        raise RepositoryError(f"int8 model {path} has custom nodes without a function "
                              f"({', '.join(missing)}); onnxruntime cannot run it")
    want = _signature(load_onnx_graph(served))
    have = _signature(model)
    for kind, mine, theirs in (("inputs", have[0], want[0]), ("outputs", have[1], want[1])):
        if mine != theirs:
            raise RepositoryError(
                f"int8 model {path} does not have the served model's {kind}: it declares "
                f"{[name for name, *_ in mine]} where {served} declares "
                f"{[name for name, *_ in theirs]} (or their types or ranks differ); quantize "
                "the served model")
    sha256 = file_sha256(path)
    if sha256 == file_sha256(served):
        raise RepositoryError(f"int8 model {path} is the served model itself ({served}); give "
                              "its quantized copy")
    meta = {prop.key: prop.value for prop in model.metadata_props}
    return Int8Model(path, sha256, meta.get(META_QUANTIZATION), scales_per_batch(model))


def read_target(repo: Path, model: str, int8: Path | None = None) -> TuneTarget:
    """The `TuneTarget` for `model` in `repo`; RepositoryError when it cannot be tuned here."""
    repo = Path(repo)
    if not repo.is_dir():
        raise RepositoryError(f"model repository {repo} is not a directory; build it with "
                              "`attndeploy package`")
    names = _models_in(repo)
    if model not in names:
        raise RepositoryError(f"no model {model!r} in {repo}; it holds "
                              f"{', '.join(names) or 'no models'}")
    cfg = _config(repo, model)
    text_model, text_config = None, None
    id_model, id_config = model, cfg
    called = id_model_of(cfg)
    if called is not None:
        if called not in names:
            raise RepositoryError(f"text model {model!r} calls the id model {called!r}, which "
                                  f"is not in {repo}; re-package the model")
        text_model, text_config = model, cfg
        id_model, id_config = called, _config(repo, called)
    if id_config.backend != cfgmod.PYTHON_BACKEND:
        backend = id_config.platform or id_config.backend or "no backend"
        raise RepositoryError(
            f"{id_model!r} is not a python-flavour model ({backend}); the local tritonserver "
            "serves only the python flavour, so tune that one (`package --flavor both` writes "
            "NAME_python) and use its values for the others")
    version = _served_version(repo, id_model, id_config)
    onnx_path = repo / id_model / str(version) / (
        id_config.default_model_filename or cfgmod.MODEL_FILE)
    generic = is_generic(load_onnx_graph(onnx_path))
    return TuneTarget(
        repo=repo, model=model, id_model=id_model, text_model=text_model, id_config=id_config,
        text_config=text_config, version=version, onnx_path=onnx_path, generic=generic,
        int8=read_int8(int8, onnx_path) if int8 is not None else None,
    )
