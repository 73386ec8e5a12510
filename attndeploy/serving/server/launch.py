"""Which models of a repository a given tritonserver can serve.

The server inside the nvidia-pytriton wheel has the python backend only, so a repository packaged
with `--flavor both` holds `onnxruntime_onnx` models it cannot load; `serve` leaves those out
(and says so) instead of failing on them.

A text model (`<name>_text`, see `text_model.py`) calls its id model, which Triton does not know
as a dependency: serving the text model serves its id model too (a requested text model brings
it in), and a text model whose id model cannot be served is left out with that reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attndeploy.errors import RepositoryError, ServerError
from attndeploy.fsutil import is_staging_name
from attndeploy.serving.packaging.model_config import parse_config
from attndeploy.serving.packaging.text_model import id_model_of
from attndeploy.serving.server import _backend_dir_for, find_tritonserver


def _backend_of(config: Any) -> str:
    if config.backend:
        return config.backend
    if config.platform == "onnxruntime_onnx":
        return "onnxruntime"
    return config.platform or "unknown"


def servable_models(
    repo: Path, requested: Sequence[str] | None = None, binary: str | Path | None = None
) -> tuple[list[str], dict[str, str]]:
    """(models to serve, {model: why it is left out}) for `repo` on this server binary.

    Models are the folders of `repo` holding a config.pbtxt, hidden (staging) folders excepted.
    A text model in `requested` adds its id model (after it, if not requested already).
    """
    repo = Path(repo)
    if not repo.is_dir():
        raise ServerError(f"model repository {repo} does not exist; build it with "
                          "`attndeploy package`")
    # pathlib's "*" matches hidden names: skip the staging folders of an interrupted `package`
    configs = {
        p.parent.name: p
        for p in sorted(repo.glob("*/config.pbtxt"))
        if not is_staging_name(p.parent.name)
    }
    if not configs:
        raise ServerError(f"model repository {repo} has no models (no folder with a "
                          "config.pbtxt); add one with `attndeploy package CHECKPOINT_OR_ONNX "
                          f"--repo {repo}`")
    parsed: dict[str, Any] = {}

    def config(name: str) -> Any:
        if name not in parsed:
            try:
                parsed[name] = parse_config(configs[name].read_text())
            except RepositoryError as exc:
                raise ServerError(f"{configs[name]}: {exc}") from exc
        return parsed[name]

    if requested:
        unknown = sorted(set(requested) - set(configs))
        if unknown:
            raise ServerError(f"no model {', '.join(unknown)} in {repo}; it holds "
                              f"{', '.join(configs) or 'no models'}")
        wanted = list(dict.fromkeys(requested))
        for name in list(wanted):  # a text model brings the id model it calls
            id_model = id_model_of(config(name))
            if id_model in configs and id_model not in wanted:
                wanted.append(id_model)
        configs = {name: configs[name] for name in wanted}
    backend_dir = _backend_dir_for(find_tritonserver(binary))
    available = {p.name for p in backend_dir.iterdir() if p.is_dir()} if backend_dir else set()
    serve: list[str] = []
    skipped: dict[str, str] = {}
    for name in configs:
        backend = _backend_of(config(name))
        if backend in available:
            serve.append(name)
        else:
            skipped[name] = (f"this tritonserver has no '{backend}' backend (it has "
                             f"{', '.join(sorted(available)) or 'none'})")
    for name in list(serve):  # a text model needs its id model served beside it
        id_model = id_model_of(config(name))
        if id_model is None or id_model in serve:
            continue
        serve.remove(name)
        skipped[name] = (f"it calls the id model '{id_model}', which "
                         + (f"is not served: {skipped[id_model]}" if id_model in skipped
                            else f"is not in {repo}; re-package the model"))
    if not serve:
        raise ServerError(f"no model in {repo} can be served by this tritonserver: "
                          + "; ".join(f"{n}: {r}" for n, r in skipped.items()))
    return serve, skipped


def find_model_onnx(repo: Path, model: str) -> Path | None:
    """`<repo>/<model>/<newest version>/model.onnx`, or None if there is none. For a text model
    (which has no ONNX file), its id model's: the file whose outputs it returns."""
    folder = Path(repo) / model
    if (folder / "config.pbtxt").is_file() and not any(folder.glob("*/model.onnx")):
        try:
            id_model = id_model_of(parse_config((folder / "config.pbtxt").read_text()))
        except (OSError, RepositoryError):
            id_model = None
        if id_model and "/" not in id_model and id_model != model:
            return find_model_onnx(repo, id_model)
    versions = sorted(
        (int(p.name), p) for p in folder.glob("*") if p.is_dir() and p.name.isdigit()
    ) if folder.is_dir() else []
    for _, version_dir in reversed(versions):
        if (version_dir / "model.onnx").is_file():
            return version_dir / "model.onnx"
    return None
