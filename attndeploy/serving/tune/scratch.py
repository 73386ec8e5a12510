"""A candidate as a repository of its own: `materialize` writes a scratch copy of the tuned
model folders holding the candidate's configs, which a fresh server then serves.

Files are hard links to the repository's (a copy where linking fails, e.g. across file
systems), so a copy costs no disk and no time even for a large ONNX; only `config.pbtxt` is
written anew (after the link is dropped, so the original is never touched). Only the served
version folders are taken. An int8 candidate adds the int8 ONNX as the next version folder of
the id model, beside the generated `model.py` of the served version.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from attndeploy.errors import RepositoryError
from attndeploy.fsutil import is_staging_name
from attndeploy.serving.packaging import model_config as cfgmod
from attndeploy.serving.tune.configs import candidate_configs, served_version
from attndeploy.serving.tune.space import INT8, Candidate
from attndeploy.serving.tune.target import TuneTarget


def _link_or_copy(source: str, target: str) -> str:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)
    return target


def _served_versions(folder: Path) -> set[str] | None:
    """The version folders a model's config serves (None: every one)."""
    cfg = cfgmod.parse_config((folder / cfgmod.CONFIG_FILE).read_text(encoding="utf-8"),
                              str(folder / cfgmod.CONFIG_FILE))
    if cfg.version_policy.WhichOneof("policy_choice") != "specific":
        return None
    return {str(v) for v in cfg.version_policy.specific.versions}


def _copy_model(source: Path, target: Path, versions: set[str] | None) -> None:
    """`source`'s folder as links, less its configs, hidden entries and unserved versions."""

    def ignore(folder: str, names: list[str]) -> set[str]:
        if Path(folder) != source:
            return set()
        return {name for name in names
                if name.startswith(cfgmod.CONFIG_FILE) or is_staging_name(name)
                or (name.isdigit() and versions is not None and name not in versions)}

    shutil.copytree(source, target, copy_function=_link_or_copy, ignore=ignore)


def materialize(target: TuneTarget, candidate: Candidate, folder: Path) -> Path:
    """Write the candidate repository into the new folder `folder`; return it."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True)
        for name in target.models:
            source = target.repo / name
            versions = _served_versions(source)
            if name == target.id_model:
                versions = {str(target.version)}
            _copy_model(source, folder / name, versions)
        for name, cfg in candidate_configs(target, candidate).items():
            (folder / name / cfgmod.CONFIG_FILE).write_text(cfgmod.serialize_config(cfg),
                                                            encoding="utf-8")
        if candidate.precision == INT8:
            version_dir = folder / target.id_model / str(served_version(target, candidate))
            version_dir.mkdir()
            write_int8_version(target, version_dir, link=True)
    except OSError as exc:
        shutil.rmtree(folder, ignore_errors=True)
        raise RepositoryError(f"cannot write the candidate repository {folder}: {exc}") from exc
    return folder


def write_int8_version(target: TuneTarget, folder: Path, *, link: bool) -> None:
    """Fill the empty version folder `folder` with the int8 ONNX and the served version's other
    files (the generated model.py). `link`: hard-link them (a scratch copy) instead of copying
    them (a repository keeps its own bytes, whatever later happens to the offered file)."""
    if target.int8 is None:
        raise RepositoryError("no int8 model was offered (--int8 PATH.onnx)")
    served = target.repo / target.id_model / str(target.version)
    model_file = target.id_config.default_model_filename or cfgmod.MODEL_FILE
    put = _link_or_copy if link else shutil.copy2
    for entry in served.iterdir():
        if entry.name != model_file and entry.is_file():
            put(str(entry), str(folder / entry.name))
    put(str(target.int8.path), str(folder / model_file))
