"""A detached server: `start_background` records it in a state file, `stop_background` ends it."""

from __future__ import annotations

import shlex
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attndeploy.errors import ServerError
from attndeploy.serving.client.protocol import Protocol, server_address
from attndeploy.serving.server.binary import find_tritonserver
from attndeploy.serving.server.processes import (
    _end_leftovers,
    _is_guard_of,
    _pid_alive,
    _terminate,
)
from attndeploy.serving.server.state import (
    STATE_FORMAT,
    _read_state,
    _write_state,
    default_state_path,
)
from attndeploy.serving.server.triton import TritonServer
from attndeploy.serving.server.view import remove_repository_view


def _is_our_server(state: dict[str, Any]) -> bool:
    """The recorded pid still runs *and* is that tritonserver (not a process reusing the pid)."""
    pid = int(state["pid"])
    if not _pid_alive(pid):
        return False
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return True  # no /proc (not Linux): trust the live pid
    marker = f"--backend-config=python,shm-region-prefix-name={state['shm_prefix']}".encode()
    return any(arg.endswith(b"tritonserver") for arg in argv) and marker in argv


def recorded_url(repo: Path, protocol: Protocol | str = Protocol.GRPC) -> str | None:
    """The address (host:port, e.g. `127.0.0.1:8101`) of `protocol`'s endpoint of the server
    that `attndeploy serve --background` records for `repo` (`default_state_path(repo)`), if
    that server still runs; None when there is no usable record (none, not ours, corrupt, no
    such address in it) or its server is gone. Never raises for the record: a caller falls back
    to its default address."""
    protocol = Protocol(protocol)
    try:
        state = _read_state(default_state_path(repo))
    except (ServerError, OSError):  # no record, a file that is not one, a path beyond reach
        return None
    if state is None:  # a corrupt record
        return None
    address = state.get(f"{protocol.value}_url")
    if not isinstance(address, str) or not _is_our_server(state):
        return None
    try:
        return server_address(address, protocol)
    except ServerError:
        return None


def _clean_up_after(state: dict[str, Any]) -> dict[str, list[Any]]:
    """End the recorded server's leftover processes, shm regions and repository view."""
    leftovers = _end_leftovers(int(state["pid"]), state["shm_prefix"])
    view = state["repository_view"]
    leftovers["repository_view"] = [view] if remove_repository_view(Path(view)) else []
    return leftovers


def start_background(
    repo: Path,
    *,
    state_path: Path | None = None,
    grpc_port: int = 8001,
    http_port: int = 8000,
    metrics_port: int = 8002,
    host: str = "127.0.0.1",
    log_file: Path | None = None,
    binary: str | Path | None = None,
    extra_args: Sequence[str] = (),
    timeout_s: float = 120.0,
    models: Sequence[str] | None = None,
    guard: bool = True,
) -> dict[str, Any]:
    """Start a detached server on `repo`, wait until it is ready, record it; return the record.

    The record (JSON, `"format": "attndeploy-server-state"`: pid, host, ports, URLs, repo,
    repository view, shm prefix, log path, binary, start time, whether the request guard fronts
    the server and the server's own ports behind it) is written atomically with mode
    0600 to `state_path`, by default `default_state_path(repo)` = `<repo>/.attndeploy-server.json`;
    the log defaults to the same path with suffix `.log`. An existing file there that is not such
    a record is an error and left alone; a live recorded server is an error; a stale record is
    cleaned up after (see `stop_background`) and replaced.
    """
    repo = Path(repo).resolve()
    state_path = Path(state_path) if state_path is not None else default_state_path(repo)
    if state_path.exists() or state_path.is_symlink():
        previous = _read_state(state_path)  # refuses a file that is not ours
        if previous is not None and _is_our_server(previous):
            where = (["--repo", str(repo)] if state_path == default_state_path(repo)
                     else ["--state-file", str(state_path)])
            raise ServerError(
                f"A server (pid {previous['pid']}, gRPC {previous.get('grpc_url')}) is already "
                f"recorded in {state_path}; stop it with "
                f"`{shlex.join(['attndeploy', 'stop', *where])}` first."
            )
        if previous is not None:
            _clean_up_after(previous)
    log_file = Path(log_file) if log_file is not None else state_path.with_suffix(".log")
    server = TritonServer(
        repo,
        grpc_port=grpc_port,
        http_port=http_port,
        metrics_port=metrics_port,
        host=host,
        log_file=log_file,
        binary=binary,
        extra_args=extra_args,
        models=models,
        die_with_parent=False,  # it must outlive this process
        guard=guard,
    )
    server.start()
    server.wait_ready(timeout_s)  # stops the server itself on failure
    state = {
        "format": STATE_FORMAT,
        "pid": server.pid,
        "host": host,
        "grpc_port": grpc_port,
        "http_port": http_port,
        "metrics_port": metrics_port,
        "grpc_url": server.grpc_url,
        "http_url": server.http_url,
        "repo": str(repo),
        "repository_view": str(server.repository_view),
        "shm_prefix": server.shm_prefix,
        "log_path": str(server.log_path),
        "binary": str(find_tritonserver(binary)),
        "started_at": time.time(),
        "models": list(models) if models is not None else None,
        "guard": guard,  # the ports above are then the guard's; the server's are behind it
        "guard_pid": server.guard_pid,
        "upstream_grpc_port": server.upstream_grpc_port,
        "upstream_http_port": server.upstream_http_port,
    }
    try:
        _write_state(state_path, state)
    except OSError as exc:
        server.stop()
        raise ServerError(
            f"Could not write state file {state_path}: {exc}; stopped the server."
        ) from exc
    return state


def stop_background(state_path: Path, grace_s: float = 15.0) -> dict[str, Any]:
    """Stop the server recorded in `state_path`, clean up after it and remove the record.

    A running server gets SIGTERM, then SIGKILL for its whole process group after `grace_s`.
    Then, whether it ran or not, what is left of it is removed: processes of its group that carry
    its shm prefix (python stubs outlive a SIGKILLed server), `/dev/shm/<prefix>*` and its
    repository view. Returns the record plus `signal`, `stop_s` and `cleaned_up` (pids, shm
    files, view removed).

    Errors (ServerError; `attndeploy stop` exits 1), leaving the file alone unless it is ours:
    - no file there, or a file that is not an attndeploy record: nothing is touched;
    - an attndeploy record too corrupt to use: it is removed;
    - a record whose server is no longer running (crashed or killed): its leftovers and the
      record are removed, and the error says so. It stays an error so that a script learns that
      the server had died before it was asked to stop; running `stop` again is harmless.
    """
    state_path = Path(state_path)
    state = _read_state(state_path)
    if state is None:
        state_path.unlink(missing_ok=True)
        raise ServerError(f"State file {state_path} is a corrupt attndeploy record; removed it.")
    pid = int(state["pid"])
    if not _is_our_server(state):
        leftovers = _clean_up_after(state)
        state_path.unlink(missing_ok=True)
        raise ServerError(
            f"The server recorded in {state_path} (pid {pid}) was no longer running (crashed or "
            f"killed); ended {len(leftovers['processes'])} leftover process(es), removed "
            f"{len(leftovers['shm'])} shared-memory file(s) and the stale record."
        )
    started = time.monotonic()
    guard_pid = state.get("guard_pid")
    if isinstance(guard_pid, int) and guard_pid > 1 and _is_guard_of(guard_pid,
                                                                     state["shm_prefix"]):
        # SIGTERM first: the guard closes its listening sockets itself and no request gets in;
        # a killed one leaves them to the kernel, which closes them a moment after it exits.
        _terminate(guard_pid, grace_s)
    used = _terminate(pid, grace_s)
    leftovers = _clean_up_after(state)
    state_path.unlink(missing_ok=True)
    return {
        **state,
        "signal": used,
        "stop_s": round(time.monotonic() - started, 3),
        "cleaned_up": leftovers,
    }
