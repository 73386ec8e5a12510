"""Processes of a server: pids, process groups, terminate, pdeathsig and shared-memory cleanup."""

from __future__ import annotations

import ctypes
import os
import re
import secrets
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attndeploy.errors import ServerError

SHM_DIR = Path("/dev/shm")
_SHM_PREFIX_PATTERN = re.compile(r"^attndeploy_[0-9a-f]{12}_$")


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, process group) of `pid` from /proc, or None if there is no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the name in parentheses may hold spaces
    return fields[0], int(fields[2])


def _pid_alive(pid: int) -> bool:
    """Whether `pid` still runs (reaping it first if it is our own exited child).

    A zombie (exited, not yet reaped by its parent, e.g. a detached server whose parent is init)
    is not running.
    """
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass  # not our child: only the probes below can tell
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc_stat = _proc_stat(pid)
    return proc_stat is None or proc_stat[0] != "Z"  # no /proc (not Linux): trust the signal probe


def _terminate(pid: int, grace_s: float, kill_wait_s: float = 5.0) -> str:
    """SIGTERM `pid`, wait up to `grace_s`, then SIGKILL its process group; return the signal used.

    Raises ServerError if the process outlives SIGKILL by `kill_wait_s` (it never blocks longer).
    """
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, kill_wait_s)):
        try:
            if sig == signal.SIGKILL and os.getpgid(pid) == pid:
                os.killpg(pid, sig)  # started in its own session: take its python stubs too
            else:
                os.kill(pid, sig)
        except ProcessLookupError:
            return sig.name
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if not _pid_alive(pid):
                return sig.name
            time.sleep(0.05)
    raise ServerError(f"tritonserver (pid {pid}) is still running after SIGKILL; check `ps {pid}`.")


def _die_with_parent_hook() -> Callable[[], None] | None:
    """A `preexec_fn` that makes Linux SIGTERM the child when the thread that started it dies.

    SIGTERM (not SIGKILL) lets tritonserver stop its python stubs and free their shared memory.
    Everything is looked up before the fork: the hook itself only calls prctl. None off Linux.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1  # <linux/prctl.h>
    sigterm = ctypes.c_ulong(signal.SIGTERM)
    zero = ctypes.c_ulong(0)
    parent = os.getpid()

    def hook() -> None:
        prctl(pr_set_pdeathsig, sigterm, zero, zero, zero)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)

    return hook


def _new_shm_prefix() -> str:
    return f"attndeploy_{secrets.token_hex(6)}_"


GUARD_MODULE = "attndeploy.serving.server.guard"  # the request guard, run with `python -m`


def guard_marker_argument(marker: str) -> str:
    """The argument that names, on the request guard's command line, the server it guards."""
    return f"--marker={marker}"


def _guards(cmdline: bytes, marker: str) -> bool:
    """Whether a process's command line is that of the request guard of server `marker`."""
    return (GUARD_MODULE.encode() in cmdline
            and guard_marker_argument(marker).encode() in cmdline)


def _is_guard_of(pid: int, marker: str) -> bool:
    """Whether `pid` runs the request guard of the server whose shm prefix is `marker`."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return _guards(cmdline, marker)


def _leftover_processes(pgid: int, marker: str) -> list[int]:
    """Live processes of group `pgid` whose command line holds `marker` (the server, its stubs),
    and the server's request guard (a session of its own, `--marker=<marker>` on its line).

    The marker (the server's shm prefix: on the server's `--backend-config` and in each stub's
    region name) keeps a group that reused the pid out of it. Empty without /proc.
    """
    found: list[int] = []
    needle = marker.encode()
    try:
        entries = list(Path("/proc").iterdir())
    except OSError:
        return found
    for entry in entries:
        if not entry.name.isdigit():
            continue
        proc_stat = _proc_stat(int(entry.name))
        if proc_stat is None or proc_stat[0] == "Z":
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        in_group = proc_stat[1] == pgid and needle in cmdline
        if in_group or _guards(cmdline, marker):
            found.append(int(entry.name))
    return found


def _end_leftovers(pgid: int, shm_prefix: str, wait_s: float = 5.0) -> dict[str, list[Any]]:
    """SIGKILL what is left of a server's process group and remove its shared-memory regions.

    Stubs whose server died ignore SIGTERM, hence SIGKILL. Returns {"processes": pids ended,
    "shm": region files removed}. ServerError if a process outlives SIGKILL by `wait_s`.
    """
    if not _SHM_PREFIX_PATTERN.match(shm_prefix):  # never a glob wider than one server's regions
        raise ServerError(f"Refusing to clean up after an unexpected shm prefix {shm_prefix!r}.")
    pids = _leftover_processes(pgid, shm_prefix)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + wait_s
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in alive if _pid_alive(pid)]
        if alive:
            time.sleep(0.05)
    if alive:
        raise ServerError(
            f"Processes {alive} of the server's group are still running after SIGKILL; check "
            f"`ps -o pid,stat,args -g {pgid}`."
        )
    removed: list[str] = []
    try:
        regions = [p for p in SHM_DIR.iterdir() if p.name.startswith(shm_prefix)]
    except OSError:
        regions = []
    for region in regions:
        try:
            region.unlink()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise ServerError(f"Could not remove the shared-memory file {region}: {exc}.") from exc
        removed.append(str(region))
    return {"processes": pids, "shm": removed}
