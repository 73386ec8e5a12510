"""Writing the chosen configuration into the repository (`tune --apply`).

Format: each changed model's `config.pbtxt` is replaced atomically (written to a temporary
name and renamed), and the config it replaces is kept beside it as `config.pbtxt.previous`
(one generation: an earlier `.previous` is replaced). Undo with
`mv config.pbtxt.previous config.pbtxt`. Triton reads only `config.pbtxt`, and check-repo skips
other files, so the kept copy changes nothing that is served. (Triton's own alternative,
`configs/<name>.pbtxt` chosen by `--model-config-name`, would need every server started with
that flag, `attndeploy serve` and the Kubernetes manifests included; a replaced `config.pbtxt`
is served by any of them as it is.)

An int8 choice adds the int8 ONNX as a new version folder of the id model (the next free
number, beside a copy of the served version's model.py); the id config then serves that version
and the text model calls it. The fp32 version folder stays, so the previous config still works.

Order. The configuration is checked first, offline, on a scratch copy (`check_repository`); a
configuration check-repo refuses is never written. Then the writes go in an order in which the
repository passes check-repo after every single one (a crash between two leaves a working
repository): the new version folder (not yet served), the `.previous` copies, and for a text
model an intermediate id config that serves both versions with the larger max_batch_size, then
the text config, then the final id config. A config the candidate leaves as it is, is not
written (the id model of a text model that runs the ONNX itself keeps its config unless the
version changes). Finally the repository is checked again, and the
configs are put back should it fail.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from attndeploy.errors import RepositoryError
from attndeploy.fsutil import atomic_write_text, output_exists
from attndeploy.output_set import atomic_directory
from attndeploy.serving.packaging import model_config as cfgmod
from attndeploy.serving.packaging.check_repo import RepoReport, check_repository
from attndeploy.serving.tune.configs import id_config, served_version, text_config
from attndeploy.serving.tune.scratch import materialize, write_int8_version
from attndeploy.serving.tune.space import INT8, Candidate
from attndeploy.serving.tune.target import TuneTarget

PREVIOUS_SUFFIX = ".previous"


@dataclass(frozen=True)
class ConfigWrite:
    """One atomic replacement of a model's config.pbtxt."""

    model: str
    path: Path
    text: str
    final: bool  # False: the intermediate id config of a text model's change


@dataclass(frozen=True)
class ApplyPlan:
    """Everything `--apply` writes, in order."""

    candidate: Candidate
    version: int  # the id model's served version after the change
    new_version: Path | None  # the int8 version folder to add
    previous: dict[str, Path]  # model -> where its current config is kept
    writes: list[ConfigWrite] = field(default_factory=list)


def _text(cfg: mc.ModelConfig) -> str:
    return cfgmod.serialize_config(cfg)


def plan_apply(target: TuneTarget, candidate: Candidate) -> ApplyPlan:
    """The writes that put `candidate` into `target.repo` (nothing is written here)."""
    version = served_version(target, candidate)
    final_id = id_config(target, candidate, version=version)
    id_path = target.repo / target.id_model / cfgmod.CONFIG_FILE
    writes = []
    previous = {target.id_model: id_path.with_name(cfgmod.CONFIG_FILE + PREVIOUS_SUFFIX)}
    if target.text_model is not None and target.text_config is not None:
        text_path = target.repo / target.text_model / cfgmod.CONFIG_FILE
        previous[target.text_model] = text_path.with_name(cfgmod.CONFIG_FILE + PREVIOUS_SUFFIX)
        between = mc.ModelConfig()
        between.CopyFrom(final_id)
        between.max_batch_size = max(final_id.max_batch_size, target.id_config.max_batch_size)
        del between.version_policy.specific.versions[:]
        between.version_policy.specific.versions.extend(sorted({target.version, version}))
        writes.append(ConfigWrite(target.id_model, id_path, _text(between),
                                  final=_text(between) == _text(final_id)))
        writes.append(ConfigWrite(target.text_model, text_path,
                                  _text(text_config(target, candidate, id_version=version)),
                                  final=True))
    if not writes or not writes[0].final:
        writes.append(ConfigWrite(target.id_model, id_path, _text(final_id), final=True))
    # A config that would be rewritten as it is stays untouched (e.g. the id model of a text
    # model that runs the ONNX itself, when the precision does not change).
    writes = [w for w in writes if not (w.final and w.text == _on_disk(w.path))]
    previous = {name: path for name, path in previous.items()
                if any(w.model == name for w in writes)}
    new_version = (target.repo / target.id_model / str(version)
                   if candidate.precision == INT8 else None)
    return ApplyPlan(candidate, version, new_version, previous, writes)


def _on_disk(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _errors_of(report: RepoReport, models: list[str]) -> list[str]:
    return [f"{f.model}: {f.message}" for f in report.errors if f.model in models]


def _check_scratch(target: TuneTarget, candidate: Candidate) -> None:
    """check-repo on a scratch copy holding the candidate; RepositoryError when it fails."""
    with tempfile.TemporaryDirectory(prefix="attndeploy-tune-check-") as tmp:
        repo = materialize(target, candidate, Path(tmp) / "repo")
        errors = _errors_of(check_repository(repo), target.models)
    if errors:
        raise RepositoryError("the tuned configuration does not pass check-repo, so nothing "
                              "was written: " + "; ".join(errors))


def _check_unchanged(target: TuneTarget) -> None:
    """RepositoryError when a tuned config changed on disk since the run read it."""
    for name, cfg in ((target.id_model, target.id_config),
                      (target.text_model, target.text_config)):
        if name is None or cfg is None:
            continue
        path = target.repo / name / cfgmod.CONFIG_FILE
        try:
            now = cfgmod.parse_config(path.read_text(encoding="utf-8"), str(path))
        except (OSError, UnicodeDecodeError) as exc:
            raise RepositoryError(f"cannot read {path}: {exc}") from exc
        if now != cfg:
            raise RepositoryError(f"{path} changed while tuning; nothing was written: run tune "
                                  "again on the repository as it is now")


def apply_candidate(target: TuneTarget, candidate: Candidate) -> dict[str, Any]:
    """Write `candidate` into `target.repo` (see the module docstring); what was written
    (`configs` empty when the repository holds that configuration already)."""
    _check_scratch(target, candidate)
    _check_unchanged(target)
    plan = plan_apply(target, candidate)
    if plan.new_version is None and not plan.writes:
        return {"candidate": candidate.name, "configs": {}, "previous": {}, "new_version": None,
                "served_version": plan.version, "check_repo": "unchanged"}
    if plan.new_version is not None:
        if output_exists(plan.new_version):
            raise RepositoryError(f"{plan.new_version} appeared while tuning; nothing was "
                                  "written: run tune again")
        with atomic_directory(plan.new_version) as staging:
            write_int8_version(target, staging, link=False)
    originals = {}
    for name, keep in plan.previous.items():
        current = keep.with_name(cfgmod.CONFIG_FILE)
        originals[name] = current.read_text(encoding="utf-8")
        atomic_write_text(keep, originals[name])
    for write in plan.writes:
        atomic_write_text(write.path, write.text)
    errors = _errors_of(check_repository(target.repo), target.models)
    if errors:  # never expected after the scratch check: put the old configs back
        for name in reversed(list(plan.previous)):
            atomic_write_text(target.repo / name / cfgmod.CONFIG_FILE, originals[name])
        raise RepositoryError("the applied configuration failed check-repo and was undone: "
                              + "; ".join(errors))
    return {
        "candidate": candidate.name,
        "configs": {w.model: str(w.path) for w in plan.writes if w.final},
        "previous": {name: str(path) for name, path in plan.previous.items()},
        "new_version": str(plan.new_version) if plan.new_version is not None else None,
        "served_version": plan.version,
        "check_repo": "passed",
    }
