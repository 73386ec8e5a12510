"""Check a Triton model repository offline (no server): `check_repository`.

Per model folder: `config.pbtxt` parses with Triton's schema; its I/O blocks and the ONNX graph's
inputs/outputs both match the model-level interface recorded in the model's metadata (names,
dtypes, dims: batch implicit, `seq` -1 in the config and symbolic in ONNX), or for a generic model
(a user's model, `generic.py`) the config matches the graph's declared tensors; every stored
tensor holds the data its dims declare, external data included (`onnx_tensors.py`); every
custom-domain (`attndeploy`) node has a model-local function; the served versions and their files
exist; the python flavour's `model.py` is exactly what this attndeploy version generates; the
labels file has one line per label; parameters and warm-up data agree with the model. A text model
(`text_model.py`) is checked against the id model it calls, and a warning says when its tokenizer
needs a Python package (`tokenizers` for WordPiece) that this Python cannot import: the local
server's python backend runs this Python (`attndeploy serve`), so it would fail to load the model.
Every quote of a file's content in a finding is cut to a bounded length (`attndeploy.echo`).
In the repository itself, a symbolic link where `attndeploy serve --background` writes its state
file or log is an error: the server would write through it, to wherever it points.

Findings are collected, never raised one at a time: the `RepoReport` is truthy when no finding
is an error, and `raise_for_errors()` turns a failed report into one `RepositoryError`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import onnx
from tritonclient.grpc import model_config_pb2 as mc

from attndeploy import __version__
from attndeploy.echo import ECHO_LIMIT, echo
from attndeploy.errors import RepositoryError
from attndeploy.fsutil import is_staging_name, is_stale_temporary, parse_temporary_name
from attndeploy.interface import ATTENTION_MASK, default_opset
from attndeploy.runtime.names import META_VERSION
from attndeploy.serving.packaging import model_config as cfgmod
from attndeploy.serving.packaging.generate_model import (
    check_generate_model,
    is_generate_config,
)
from attndeploy.serving.packaging.generic import (
    GenericInfo,
    generic_config_mismatches,
    read_generic_info,
)
from attndeploy.serving.packaging.image_model import (
    check_image_model,
    is_image_config,
    read_image_source,
)
from attndeploy.serving.packaging.model_template import (
    GENERIC_TEMPLATE_RESOURCE,
    TEMPLATE_RESOURCE,
    generate_generic_model_py,
    generate_model_py,
    parse_header,
    template_digest,
)
from attndeploy.serving.packaging.onnx_info import (
    ModelInfo,
    is_generic,
    load_onnx_graph,
    missing_functions,
    read_model_info,
)
from attndeploy.serving.packaging.signature import config_mismatches, onnx_mismatches
from attndeploy.serving.packaging.text_model import (  # noqa: F401  (re-exported)
    TOKENIZER_FILE,
    is_text_config,
)
from attndeploy.serving.packaging.text_model_checks import (  # noqa: F401  (re-exported)
    check_server_python,
    check_text_model,
    text_model_requirement,
)
from attndeploy.serving.packaging.triton_releases import TRITON_ORT_MAX_OPSET, TRITON_RELEASE
from attndeploy.serving.server.state import default_log_path, default_state_path

Severity = Literal["error", "warning"]


# the most characters of one finding: each quote of a file's content in it is cut to
# ECHO_LIMIT already (`echo`), so this bounds what the readers' own errors may add
FINDING_LIMIT = 10 * ECHO_LIMIT


@dataclass(frozen=True)
class Finding:
    """One problem found in one model folder (`model` "" = the repository itself), said on one
    line of at most FINDING_LIMIT characters."""

    model: str
    severity: Severity
    message: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "message", echo(self.message, FINDING_LIMIT))

    def to_dict(self) -> dict[str, str]:
        return {"model": self.model, "severity": self.severity, "message": self.message}


@dataclass
class RepoReport:
    """The result of `check_repository`: truthy when there is no error (warnings allowed)."""

    repo: Path
    models: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]

    @property
    def passed(self) -> bool:
        return not self.errors

    def __bool__(self) -> bool:
        return self.passed

    def to_dict(self) -> dict[str, Any]:
        return {
            "repo": str(self.repo),
            "passed": self.passed,
            "models": list(self.models),
            "findings": [f.to_dict() for f in self.findings],
        }

    def summary(self) -> str:
        """A few lines for a person: verdict, then one line per finding."""
        verdict = "passed" if self.passed else "FAILED"
        lines = [
            f"{self.repo}: {len(self.models)} model(s), {len(self.errors)} error(s), "
            f"{len(self.warnings)} warning(s): {verdict}"
        ]
        lines += [f"  {f.severity}: {f.model or '<repo>'}: {f.message}" for f in self.findings]
        return "\n".join(lines)

    def raise_for_errors(self) -> None:
        """Raise one RepositoryError listing every error on one line; None when it passed."""
        if not self.passed:
            listed = "; ".join(f"{f.model or '<repo>'}: {f.message}" for f in self.errors)
            raise RepositoryError(f"{self.repo}: {len(self.errors)} error(s): {listed}")


class _Model:
    """Findings of one model folder."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.name = path.name
        self.findings: list[Finding] = []

    def error(self, message: str) -> None:
        self.findings.append(Finding(self.name, "error", message))

    def warning(self, message: str) -> None:
        self.findings.append(Finding(self.name, "warning", message))


def check_repository(repo: Path) -> RepoReport:
    """Check every model folder of `repo` (see the module docstring); never starts a server.

    Raises RepositoryError only when `repo` is not a directory; everything else is a finding.
    Plain files (a server state file, labels kept beside) are not models and are skipped. A
    hidden folder (name starting with '.') is an error: Triton takes every folder for a model,
    and one left by a packager killed while staging is a broken one.
    """
    repo = Path(repo)
    if not repo.is_dir():
        raise RepositoryError(f"Model repository {repo} is not a directory.")
    report = RepoReport(repo=repo)
    links = _server_file_links(repo)
    report.findings.extend(Finding("", "error", message) for message in links.values())
    for path in sorted(repo.iterdir()):
        if path in links or not path.is_dir():
            continue
        if is_staging_name(path.name):
            report.findings.append(Finding("", "error", _hidden_folder_message(path.name)))
            continue
        model = _Model(path)
        _check_model(model)
        report.models.append(model.name)
        report.findings.extend(model.findings)
    if not report.models:
        report.findings.append(Finding("", "error", "the repository holds no model folder"))
    return report


# what `attndeploy serve --background` writes into the repository when told no other path
SERVER_FILES = (("state file", default_state_path), ("log", default_log_path))


def _server_file_links(repo: Path) -> dict[Path, str]:
    """A message for each of the background server's files in `repo` that is a symbolic link
    (dangling or not): the server would write through it, to wherever the link points."""
    found: dict[Path, str] = {}
    for what, where in SERVER_FILES:
        path = where(repo)
        if not path.is_symlink():
            continue
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        found[path] = (
            f"{path.name} is a symbolic link (to {echo(target)}); `attndeploy serve --background` "
            f"writes its {what} there, so the link would redirect the server's writes to its "
            "target: remove the link"
        )
    return found


def _hidden_folder_message(name: str) -> str:
    staged = parse_temporary_name(name)
    if staged is None:
        return (f"hidden folder {echo(name)} is not a model folder (Triton would try to load it); "
                "remove it or move it out of the repository")
    model, pid = staged
    if is_stale_temporary(name):
        return (f"staging folder {echo(name)} was left by an interrupted write of "
                f"{echo(model)} (process {pid} no longer runs); remove it, or re-run "
                "`attndeploy package`, which removes it")
    return (f"staging folder {echo(name)}: process {pid} is still writing {echo(model)}; check "
            "again when it has finished (if it hangs, stop it and remove the folder)")


# --------------------------------------------------------------------------- one model


def _flavor(cfg: mc.ModelConfig) -> str | None:
    if cfg.backend == cfgmod.PYTHON_BACKEND:
        return "python"
    if cfg.platform == cfgmod.ONNXRUNTIME_PLATFORM or cfg.backend == "onnxruntime":
        return "onnxruntime"
    return None


def _served_versions(model: _Model, cfg: mc.ModelConfig) -> list[int]:
    """The version folders Triton would load; an error for each listed one that is missing."""
    present = sorted(
        int(p.name) for p in model.path.iterdir() if p.is_dir() and p.name.isdigit()
    )
    policy = cfg.version_policy.WhichOneof("policy_choice")
    if policy == "specific":
        wanted = sorted(set(cfg.version_policy.specific.versions))
        for version in wanted:
            if version not in present:
                model.error(f"version {version} is listed in version_policy but has no folder")
        return [v for v in wanted if v in present]
    if not present:
        model.error("no version folder (e.g. 1/) holds the model")
        return []
    if policy == "all":
        return present
    count = cfg.version_policy.latest.num_versions if policy == "latest" else 1
    return present[-max(count, 1):]


def _check_model_py(model: _Model, version_dir: Path, generic: bool) -> None:
    """The python flavour's model.py is what this version generates (generic or id model)."""
    path = version_dir / cfgmod.MODEL_PY
    if not path.is_file():
        model.error(f"{version_dir.name}/{cfgmod.MODEL_PY} is missing (python flavour)")
        return
    text = path.read_text(encoding="utf-8", errors="replace")
    expected = generate_generic_model_py() if generic else generate_model_py()
    if text == expected:
        return
    resource = GENERIC_TEMPLATE_RESOURCE if generic else TEMPLATE_RESOURCE
    header = parse_header(text)
    where = f"{version_dir.name}/{cfgmod.MODEL_PY}"
    if header is None:
        model.error(f"{where} was not generated by attndeploy; re-package the model")
    elif header.version != __version__ or header.digest != template_digest(resource):
        model.error(
            f"{where} was generated by attndeploy {echo(header.version)} (template "
            f"{echo(header.digest)}), not by this version {__version__} (template "
            f"{template_digest(resource)}); re-package"
        )
    else:
        model.error(f"{where} was edited by hand; re-package the model to regenerate it")


def _check_onnx(
    model: _Model, path: Path, where: str
) -> tuple[onnx.ModelProto, ModelInfo | GenericInfo] | None:
    info: ModelInfo | GenericInfo
    try:
        onnx_model = load_onnx_graph(path)
        if is_generic(onnx_model) or read_image_source(onnx_model, where) is not None:
            # a user's model, or an image export's pixel model: checked by its graph's tensors
            version = next((p.value for p in onnx_model.metadata_props
                            if p.key == META_VERSION), "?")
            info = read_generic_info(onnx_model, version, where)
        else:
            info = read_model_info(onnx_model, source=where)
    except RepositoryError as exc:
        model.error(str(exc))
        return None
    for op in missing_functions(onnx_model):
        model.error(
            f"{where}: custom node {echo(op)} has no model-local function; onnxruntime cannot "
            "run it"
        )
    if isinstance(info, ModelInfo):
        for problem in onnx_mismatches(onnx_model, info.interface):
            model.error(f"{where}: {problem}")
    return onnx_model, info


def _check_parameters(model: _Model, cfg: mc.ModelConfig, info: ModelInfo) -> None:
    """The python flavour's parameters (read by model.py) against the model's metadata."""
    params = {key: value.string_value for key, value in cfg.parameters.items()}
    expected = {
        cfgmod.PARAM_VOCAB_SIZE: str(info.vocab_size),
        cfgmod.PARAM_HEAD: info.head,
        cfgmod.PARAM_GATED: "true" if info.gated else "false",
    }
    for key, want in expected.items():
        if params.get(key) != want:
            model.error(f"parameter {key} is {echo(repr(params.get(key)))}, the model needs "
                        f"{want!r}")
    raw = params.get(cfgmod.PARAM_MAX_SEQ)
    if raw is None or not raw.isdigit() or not 1 <= int(raw) <= info.max_seq:
        model.error(
            f"parameter {cfgmod.PARAM_MAX_SEQ} is {echo(repr(raw))}; it must be an integer in "
            f"[1, {info.max_seq}] (the model's max_seq)"
        )
    threads = params.get(cfgmod.PARAM_ORT_THREADS, "1")
    if not threads.isdigit() or int(threads) < 1:
        model.error(f"parameter {cfgmod.PARAM_ORT_THREADS} is {echo(repr(threads))}; it must be "
                    ">= 1")
    if cfg.HasField("dynamic_batching") and not all(i.allow_ragged_batch for i in cfg.input):
        model.warning(
            "inputs are not allow_ragged_batch: requests of different lengths will not be "
            "batched together"
        )


def _check_labels(model: _Model, cfg: mc.ModelConfig, info: ModelInfo) -> None:
    names = {o.label_filename for o in cfg.output if o.label_filename}
    default = model.path / cfgmod.LABELS_FILE
    if default.is_file():
        names.add(cfgmod.LABELS_FILE)
    for name in sorted(names):
        path = model.path / name
        if not os.path.isfile(path):  # False for a name too long to exist
            model.error(f"label file {echo(name)} (label_filename) is missing")
            continue
        count = len(path.read_text(encoding="utf-8", errors="replace").splitlines())
        if count != info.num_labels:
            model.error(f"{echo(name)} has {count} line(s), the model has {info.num_labels} labels")


def _check_warmup(model: _Model, cfg: mc.ModelConfig) -> None:
    inputs = {i.name: i for i in cfg.input}
    for warmup in cfg.model_warmup:
        label = f"warm-up {echo(repr(warmup.name))}"
        if set(warmup.inputs) != set(inputs):
            model.error(f"{label} feeds {echo(str(sorted(warmup.inputs)))}, the model takes "
                        f"{echo(str(sorted(inputs)))}")
        for name, entry in warmup.inputs.items():
            if name == ATTENTION_MASK and entry.zero_data:
                model.error(f"{label}: an all-zero attention_mask is invalid input")
            if not entry.input_data_file:
                continue
            path = model.path / cfgmod.WARMUP_DIR / entry.input_data_file
            if not os.path.isfile(path):
                model.error(f"{label}: data file warmup/{echo(entry.input_data_file)} is missing")
                continue
            itemsize = 1 if entry.data_type == mc.TYPE_BOOL else (
                8 if entry.data_type in (mc.TYPE_INT64, mc.TYPE_FP64) else 4
            )
            size = max(warmup.batch_size, 1) * int(np.prod(list(entry.dims))) * itemsize
            if path.stat().st_size != size:
                model.error(
                    f"{label}: warmup/{echo(entry.input_data_file)} has "
                    f"{path.stat().st_size} bytes, expected {size}"
                )
            elif name == ATTENTION_MASK and entry.data_type == mc.TYPE_INT64:
                mask = np.frombuffer(path.read_bytes(), dtype=np.int64)
                if not mask.any():
                    model.error(f"{label}: an all-zero attention_mask is invalid input")


def _check_generic(model: _Model, cfg: mc.ModelConfig, info: GenericInfo) -> None:
    """A generic model: its config against the graph's declared tensors, and ORT_THREADS."""
    for problem in generic_config_mismatches(cfg, info):
        model.error(problem)
    threads = cfg.parameters[cfgmod.PARAM_ORT_THREADS].string_value \
        if cfgmod.PARAM_ORT_THREADS in cfg.parameters else "1"
    if not threads.isdigit() or int(threads) < 1:
        model.error(f"parameter {cfgmod.PARAM_ORT_THREADS} is {echo(repr(threads))}; it must be "
                    ">= 1")
    if cfg.model_warmup:
        _check_warmup(model, cfg)


def _check_model(model: _Model) -> None:
    config_path = model.path / cfgmod.CONFIG_FILE
    if not config_path.is_file():
        model.error(f"{cfgmod.CONFIG_FILE} is missing")
        return
    try:
        cfg = cfgmod.parse_config(config_path.read_text(encoding="utf-8"), str(config_path))
    except RepositoryError as exc:
        model.error(str(exc))
        return
    except UnicodeDecodeError as exc:
        model.error(f"{config_path} is not UTF-8 text (byte {exc.start} is "
                    f"0x{exc.object[exc.start]:02x})")
        return
    if cfg.name and cfg.name != model.name:
        model.error(f"config name {echo(repr(cfg.name))} differs from the folder name")
    if is_generate_config(cfg):  # `<name>_generate`: a decoder's token streams
        check_generate_model(model, cfg, _served_versions(model, cfg))
        return
    if is_image_config(cfg):  # `<name>_image`: encoded images in, its own copy of the ONNX
        check_image_model(model, cfg, _served_versions(model, cfg))
        return
    if is_text_config(cfg):  # `<name>_text`: checked against the id model it calls
        check_text_model(model, cfg, _served_versions(model, cfg))
        check_server_python(model)
        return
    flavor = _flavor(cfg)
    if flavor is None:
        what = echo(cfg.backend or cfg.platform or "no backend")
        model.warning(f"not an attndeploy model ({what}); not checked")
        return
    info: ModelInfo | GenericInfo | None = None
    model_file = cfg.default_model_filename or cfgmod.MODEL_FILE
    for version in _served_versions(model, cfg):
        version_dir = model.path / str(version)
        onnx_path = version_dir / model_file
        where = f"{version}/{echo(model_file)}"
        if not os.path.isfile(onnx_path):
            model.error(f"{where} is missing")
            continue
        checked = _check_onnx(model, onnx_path, where)
        if flavor == "python":
            generic = checked is not None and isinstance(checked[1], GenericInfo)
            _check_model_py(model, version_dir, generic)
        if checked is None:
            continue
        onnx_model, info = checked
        opset = default_opset(onnx_model)
        if flavor == "onnxruntime" and opset is not None and opset > TRITON_ORT_MAX_OPSET:
            model.warning(
                f"{where} uses opset {opset}; Triton {TRITON_RELEASE.server}'s onnxruntime backend "
                f"runs opsets up to {TRITON_ORT_MAX_OPSET}: check your Triton version"
            )
    if info is None:
        return  # nothing to compare the config with (the reasons are already findings)
    if isinstance(info, GenericInfo):
        _check_generic(model, cfg, info)
        return
    for problem in config_mismatches(cfg, info.interface):
        model.error(problem)
    if flavor == "python":
        _check_parameters(model, cfg, info)
    _check_labels(model, cfg, info)
    _check_warmup(model, cfg)
