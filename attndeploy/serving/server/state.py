"""The background server's state file: its marker, atomic write, and refusal of foreign files."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

from attndeploy.errors import ServerError
from attndeploy.serving.server.processes import _SHM_PREFIX_PATTERN

STATE_FILE_NAME = ".attndeploy-server.json"
STATE_FORMAT = "attndeploy-server-state"  # the marker that makes a file ours to replace or delete
STATE_MAX_BYTES = 64 * 1024  # a record is a few hundred bytes; anything larger is not one


def default_state_path(repo: Path) -> Path:
    """`<repo>/.attndeploy-server.json`: one background server per repository.

    Triton only treats directories of a repository as models, and the server reads a repository
    view anyway, so the state and log files beside the models are never served.
    """
    return Path(repo) / STATE_FILE_NAME


def default_log_path(repo: Path) -> Path:
    """`<repo>/.attndeploy-server.log`: the default state file's path with suffix `.log`, where
    the background server's log goes when no log file is given."""
    return default_state_path(repo).with_suffix(".log")


def _not_ours(path: Path, why: str) -> ServerError:
    return ServerError(
        f"{path} is not an attndeploy server state file ({why}); left it untouched. Pass the "
        "--state-file that `attndeploy serve --background` wrote, or a new path."
    )


def _read_state(path: Path) -> dict[str, Any] | None:
    """The record in `path`; None if it is an attndeploy record that cannot be used (corrupt).

    Missing, or anything not recognisably an attndeploy record (no `format` marker: a config, a
    model, a record of an older attndeploy), is a ServerError and the file is left alone.
    """
    if not path.exists():
        raise ServerError(
            f"No background server is recorded at {path}; start one with "
            "`attndeploy serve --background`, or give `attndeploy stop` the --repo (or "
            "--state-file) that the server was started with."
        )
    if not path.is_file():
        raise _not_ours(path, "not a regular file")
    try:
        with open(path, "rb") as handle:
            data = handle.read(STATE_MAX_BYTES + 1)
    except OSError as exc:
        raise ServerError(f"Could not read state file {path}: {exc}.") from exc
    if len(data) > STATE_MAX_BYTES:
        raise _not_ours(path, f"larger than {STATE_MAX_BYTES} bytes")
    try:
        state = json.loads(data.decode())
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise _not_ours(path, "not JSON") from None
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        raise _not_ours(path, f'no "format": "{STATE_FORMAT}"')
    pid, prefix, view = state.get("pid"), state.get("shm_prefix"), state.get("repository_view")
    if (
        not isinstance(pid, int)
        or pid <= 1
        or not isinstance(prefix, str)
        or not _SHM_PREFIX_PATTERN.match(prefix)
        or not isinstance(view, str)
    ):
        return None
    return state


def _write_state(path: Path, state: dict[str, Any]) -> None:
    """Write the record atomically (a temporary beside it, then one rename), mode 0600."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(tmp, flags, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(json.dumps(state, indent=2) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
