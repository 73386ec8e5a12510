"""The repository view: a private folder of symlinks to the model folders a server reads."""

from __future__ import annotations

import os
import stat
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from attndeploy.errors import ServerError
from attndeploy.fsutil import is_staging_name

VIEW_PREFIX = "attndeploy-models-"


def _model_folders(repo: Path, models: Sequence[str] | None) -> dict[str, Path]:
    """{name: folder} to serve: `models`, or every folder of `repo` but hidden (staging) ones."""
    repo = repo.resolve()
    if models is None:
        return {
            entry.name: entry
            for entry in sorted(repo.iterdir())
            if entry.is_dir() and not is_staging_name(entry.name)
        }
    folders: dict[str, Path] = {}
    for name in models:
        folder = repo / name
        if not name or name != folder.name or is_staging_name(name) or not folder.is_dir():
            raise ServerError(
                f"'{name}' is not a model folder of {repo}; name a folder that holds a "
                "config.pbtxt (hidden folders are never served)."
            )
        folders[name] = folder
    return folders


def make_repository_view(repo: Path, models: Sequence[str] | None = None) -> Path:
    """A new private folder (mode 0700, under the temp dir) of symlinks to the folders to serve.

    Triton 2.51 loads models, python backend included, through symlinked model folders. Serving
    the view instead of `repo` means a folder added to `repo` later is never picked up, and hidden
    staging folders are never served. Remove it with `remove_repository_view`.
    """
    folders = _model_folders(Path(repo), models)
    _remove_orphaned_views()
    view = Path(tempfile.mkdtemp(prefix=VIEW_PREFIX))
    try:
        for name, folder in folders.items():
            os.symlink(folder, view / name, target_is_directory=True)
    except OSError as exc:
        remove_repository_view(view)
        raise ServerError(f"Could not make the repository view {view}: {exc}.") from exc
    return view


def remove_repository_view(view: Path) -> bool:
    """Remove a folder made by `make_repository_view`; return whether this call removed it.

    Only symlinks and then the empty folder are removed (never what the links point to), so a
    path that is not such a view is left as it is.
    """
    view = Path(view)
    if not view.name.startswith(VIEW_PREFIX) or view.is_symlink() or not view.is_dir():
        return False
    for entry in view.iterdir():
        if entry.is_symlink():
            entry.unlink(missing_ok=True)
    try:
        view.rmdir()
    except OSError:
        return False
    return True


def _remove_orphaned_views(min_age_s: float = 600.0) -> list[Path]:
    """Remove this user's views that no running process serves (their server was killed).

    A view is orphaned when it is older than `min_age_s` (a server is started milliseconds after
    its view is made) and no process has `--model-repository=<view>` in its command line.
    Nothing is removed without /proc (where the check cannot be made).
    """
    proc = Path("/proc")
    if not proc.is_dir():
        return []
    root = Path(tempfile.gettempdir())
    try:
        candidates = [p for p in root.iterdir() if p.name.startswith(VIEW_PREFIX)]
    except OSError:
        return []
    now, uid = time.time(), os.getuid()
    old = []
    for view in candidates:
        try:
            info = view.lstat()
        except OSError:
            continue
        if info.st_uid == uid and stat.S_ISDIR(info.st_mode) and now - info.st_mtime > min_age_s:
            old.append(view)
    if not old:
        return []
    served: set[bytes] = set()
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            served.update(arg for arg in argv if arg.startswith(b"--model-repository="))
    removed = []
    for view in old:
        if f"--model-repository={view}".encode() not in served and remove_repository_view(view):
            removed.append(view)
    return removed
