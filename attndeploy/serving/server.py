"""Start, wait for and stop a local Triton Inference Server (`tritonserver`) on a model repository.

The binary normally comes from the `nvidia-pytriton` wheel, which ships `tritonserver` 2.51 with the
python backend (see "Serving: facts about Triton here" in the architecture notes). Three things make
that binary work outside the pytriton library:

- a backend directory of *symlinks* into the wheel (`prepare_backend_dir`): a copied stub cannot
  find its bundled `libcudart` and the server hangs while loading;
- the current interpreter's `bin/` first on the server's `PATH`: the python backend's stub starts
  Python isolated (`PYTHONPATH` is ignored) and finds its environment through `python3` on `PATH`;
- `--exit-on-error=false`, so a model that fails to load leaves the server up and its reason can be
  read from the repository index instead of scraped from the log.

Security. Triton has no authentication, and serving a repository runs its `model.py` files. So no
client may change what is served: the server runs with `--model-control-mode=none` (the repository
API's load and unload answer 503 "explicit model load / unload is not allowed if polling is
enabled"; the index stays readable) on a *repository view*, a fresh private folder holding only
symlinks to the model folders to serve, made at each start and removed at stop. Hidden folders
(the staging folders of an interrupted `attndeploy package`) are never served. Every endpoint
binds to loopback unless told otherwise; `exposure_warning` says what a wider address needs.

Clean-up. The server leads its own process group (its python backend stubs inherit it) and gives
the python backend a shared-memory prefix of its own (`attndeploy_<hex>_`). Stopping ends what is
left of that group and removes `/dev/shm/<prefix>*`, even after the server itself was killed
(a stub whose server was SIGKILLed can outlive it, ignoring SIGTERM, and keep its region). A
foreground server gets SIGTERM from Linux when the thread that started it dies
(`PR_SET_PDEATHSIG`), so a killed `attndeploy serve` does not leave a server answering.

`TritonServer` runs one server as a context manager; `start_background` / `stop_background` run one
detached and remember it in a small JSON state file (for `attndeploy serve --background` / `stop`).
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import ipaddress
import json
import os
import re
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from attndeploy.errors import ServerError
from attndeploy.fsutil import is_staging_name

ENV_BINARY = "ATTNDEPLOY_TRITONSERVER"
STATE_FILE_NAME = ".attndeploy-server.json"
STATE_FORMAT = "attndeploy-server-state"  # the marker that makes a file ours to replace or delete
STATE_MAX_BYTES = 64 * 1024  # a record is a few hundred bytes; anything larger is not one
VIEW_PREFIX = "attndeploy-models-"
SHM_DIR = Path("/dev/shm")
LOG_TAIL_LINES = 30
_SHM_PREFIX_PATTERN = re.compile(r"^attndeploy_[0-9a-f]{12}_$")
_INSTALL_HINT = (
    "install it with `pip install 'attndeploy[serve]'` (or `pip install nvidia-pytriton`), "
    f"or point --tritonserver / the {ENV_BINARY} environment variable at a tritonserver binary"
)


# --------------------------------------------------------------------------- locating the binary


def _pytriton_server_dir() -> Path | None:
    """`<site-packages>/pytriton/tritonserver` of the installed wheel (pytriton is not imported)."""
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "tritonserver"
        if candidate.is_dir():
            return candidate
    return None


def _check_executable(path: Path, source: str) -> Path:
    if not path.is_file():
        raise ServerError(f"tritonserver not found at {path} (from {source}); {_INSTALL_HINT}.")
    if not os.access(path, os.X_OK):
        raise ServerError(f"{path} (from {source}) is not executable; run `chmod +x {path}`.")
    return path


def find_tritonserver(explicit: str | Path | None = None) -> Path:
    """Path of the `tritonserver` binary to run.

    Order: `explicit`, the `ATTNDEPLOY_TRITONSERVER` environment variable, `tritonserver` on
    `PATH`, then the binary inside the installed `nvidia-pytriton` wheel. An explicit path or
    environment variable that does not point at an executable is an error, never skipped.
    """
    if explicit is not None:
        return _check_executable(Path(explicit).expanduser(), "the explicit binary argument")
    from_env = os.environ.get(ENV_BINARY)
    if from_env:
        return _check_executable(Path(from_env).expanduser(), f"${ENV_BINARY}")
    on_path = shutil.which("tritonserver")
    if on_path:
        return Path(on_path)
    server_dir = _pytriton_server_dir()
    if server_dir is not None:
        return _check_executable(server_dir / "bin" / "tritonserver", "the nvidia-pytriton wheel")
    raise ServerError(f"No tritonserver binary found; {_INSTALL_HINT}.")


# --------------------------------------------------------------------------- backend directory


def _link(target: Path, link: Path) -> None:
    """Make `link` a symlink to `target`, replacing whatever is there atomically."""
    if link.is_symlink() and os.readlink(link) == str(target):
        return
    tmp = link.with_name(f".{link.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    os.symlink(target, tmp)
    os.replace(tmp, link)


def prepare_backend_dir(root: Path) -> Path:
    """Build `<root>/python/` from symlinks into the nvidia-pytriton wheel; return `root`.

    The links are `libtriton_python.so`, `triton_python_backend_utils.py` and the
    `triton_python_backend_stub` built for the running Python (`python_backend_stubs/3.x/`).
    They must be symlinks: a copied stub cannot find its bundled libcudart and the server hangs.
    Pass the returned directory as `--backend-directory`. Safe to call again (idempotent).
    """
    server_dir = _pytriton_server_dir()
    if server_dir is None:
        raise ServerError(
            f"The python backend comes from the nvidia-pytriton wheel; {_INSTALL_HINT}."
        )
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    backend = server_dir / "backends" / "python"
    stub = server_dir / "python_backend_stubs" / version / "triton_python_backend_stub"
    targets = [backend / "libtriton_python.so", backend / "triton_python_backend_utils.py", stub]
    for target in targets:
        if not target.is_file():
            raise ServerError(
                f"{target} is missing from the nvidia-pytriton wheel (Python {version}); "
                "reinstall it with `pip install --force-reinstall nvidia-pytriton` or use a "
                "Python version it ships a stub for."
            )
    python_dir = Path(root) / "python"
    python_dir.mkdir(parents=True, exist_ok=True)
    for target in targets:
        _link(target, python_dir / target.name)
    return Path(root)


def _default_backend_root() -> Path:
    """A per-wheel, per-Python cache folder shared by every server started from this environment."""
    server_dir = _pytriton_server_dir()
    key = hashlib.sha1(str(server_dir).encode()).hexdigest()[:12]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    return cache / "attndeploy" / "triton-backends" / f"{key}-py{version}"


def _backend_dir_for(binary: Path) -> Path | None:
    """The `--backend-directory` for `binary`: linked from the wheel, or the install's own."""
    server_dir = _pytriton_server_dir()
    if server_dir is not None and binary.resolve().is_relative_to(server_dir.resolve()):
        return prepare_backend_dir(_default_backend_root())
    own = binary.resolve().parent.parent / "backends"  # a full install: /opt/tritonserver/...
    return own if own.is_dir() else None


# --------------------------------------------------------------------------- ports and processes


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on `host` a moment ago (for tests; another process may take it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def free_ports(count: int = 3, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct ports that were free a moment ago (e.g. gRPC, HTTP, metrics)."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port(host)
        if port not in ports:
            ports.append(port)
    return ports


def _port_is_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # Like the server itself: a TIME_WAIT leftover of a stopped server does not block the port.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _client_host(host: str) -> str:
    """The address a client on this machine dials for a server bound to `host`."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def is_loopback_host(host: str) -> bool:
    """Whether `host` reaches this machine only: 127.0.0.0/8, ::1 or `localhost`."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # another host name: it may resolve to any interface


def exposure_warning(host: str) -> str | None:
    """One line to print when the server binds to `host` beyond loopback; None on loopback."""
    if is_loopback_host(host):
        return None
    return (
        f"--host {host or '(all interfaces)'} is not a loopback address and tritonserver has no "
        "authentication: anyone who reaches it can run the served models; put a reverse proxy "
        "with TLS and authentication in front of it (or, on Kubernetes, a Service with a "
        "NetworkPolicy)"
    )


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


def _log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last `lines` lines of the server log for a person to read.

    Drops the ASCII status tables (their content is in the repository index) and blank lines, and
    the usage text printed after an unrecognised option (the line naming it comes first).
    """
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"(could not read {path}: {exc})"
    kept: list[str] = []
    for line in text.splitlines():
        if line.startswith("Usage: tritonserver"):
            break
        if line.strip() and not line.startswith(("+", "|")):
            kept.append(line)
    return "\n".join(kept[-lines:])


# --------------------------------------------------------------------------- what the server sees


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


def _new_shm_prefix() -> str:
    return f"attndeploy_{secrets.token_hex(6)}_"


def _leftover_processes(pgid: int, marker: str) -> list[int]:
    """Live processes of group `pgid` whose command line holds `marker` (the server, its stubs).

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
        if proc_stat is None or proc_stat[1] != pgid or proc_stat[0] == "Z":
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if needle in cmdline:
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


# --------------------------------------------------------------------------- the server


class TritonServer:
    """One `tritonserver` process serving `repo`; a context manager that starts it and waits.

    All endpoints (gRPC, HTTP, metrics) bind to `host` (loopback by default). `grpc_url` and
    `http_url` are `host:port` strings as `tritonclient.grpc` / `tritonclient.http` expect them.
    Readiness means: server live and ready, and every served model READY. `models` limits the
    server to those model folders (e.g. to leave out a flavour whose backend this server lacks);
    None serves every model folder of the repository but hidden ones. What is served is fixed at
    start: the repository API cannot load, unload or replace models (see the module docstring).
    The process runs in its own session; `stop()` (or leaving the `with` block) ends it and cleans
    up after it. With `die_with_parent` (the default) Linux sends the server SIGTERM when the
    thread that called `start()` dies, so start it from a thread that outlives it (the main one);
    a server meant to outlive this process (`start_background`) passes False.
    """

    def __init__(
        self,
        repo: Path,
        *,
        grpc_port: int = 8001,
        http_port: int = 8000,
        metrics_port: int = 8002,
        host: str = "127.0.0.1",
        log_file: Path | None = None,
        binary: str | Path | None = None,
        extra_args: Sequence[str] = (),
        ready_timeout_s: float = 120.0,
        stop_grace_s: float = 15.0,
        models: Sequence[str] | None = None,
        die_with_parent: bool = True,
    ) -> None:
        self.repo = Path(repo)
        self.models = list(models) if models is not None else None
        self.grpc_port, self.http_port, self.metrics_port = grpc_port, http_port, metrics_port
        self.host = host
        self._log_file = Path(log_file) if log_file is not None else None
        self._binary = binary
        if any(arg.startswith("--model-control-mode") for arg in extra_args):
            raise ServerError(
                "extra_args may not set --model-control-mode: the repository API stays off so "
                "that no client can load, unload or replace models."
            )
        self._extra_args = list(extra_args)
        self._ready_timeout_s = ready_timeout_s
        self._stop_grace_s = stop_grace_s
        self._die_with_parent = die_with_parent
        self._proc: subprocess.Popen[bytes] | None = None
        self.repository_view: Path | None = None  # the folder the server reads, while it runs
        self.shm_prefix: str | None = None  # the python backend's shared-memory prefix

    # ---- properties
    @property
    def grpc_url(self) -> str:
        return f"{_client_host(self.host)}:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        return f"{_client_host(self.host)}:{self.http_port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def log_path(self) -> Path | None:
        """The server's stdout+stderr, rewritten at each start (a temp file unless given)."""
        return self._log_file

    # ---- lifecycle
    def _command(self, binary: Path, view: Path, shm_prefix: str) -> list[str]:
        # --exit-timeout-secs bounds the drain of in-flight requests on SIGTERM (default 30 s).
        exit_timeout = max(1, int(self._stop_grace_s) - 5)
        command = [
            str(binary),
            f"--model-repository={view}",
            "--model-control-mode=none",  # no load/unload/replace through the repository API
            f"--grpc-address={self.host}",
            f"--grpc-port={self.grpc_port}",
            f"--http-address={self.host}",
            f"--http-port={self.http_port}",
            f"--metrics-address={self.host}",
            f"--metrics-port={self.metrics_port}",
            "--allow-gpu-metrics=false",  # quiets the NVML/DCGM warnings of CPU-only machines
            "--strict-readiness=true",
            "--exit-on-error=false",  # keep a failed model's reason readable from the index
            f"--exit-timeout-secs={exit_timeout}",
            f"--backend-config=python,shm-region-prefix-name={shm_prefix}",
        ]
        backend_dir = _backend_dir_for(binary)
        if backend_dir is not None:
            command.append(f"--backend-directory={backend_dir}")
        return command + self._extra_args

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        # The python backend stub ignores PYTHONPATH; it finds this environment via `python3`.
        bin_dir = str(Path(sys.executable).parent)
        env["PATH"] = os.pathsep.join([bin_dir, env.get("PATH", "")])
        return env

    def _check_ports(self) -> None:
        ports = {"gRPC": self.grpc_port, "HTTP": self.http_port, "metrics": self.metrics_port}
        for name, port in ports.items():
            if not 1 <= port <= 65535:
                raise ServerError(f"The {name} port must be between 1 and 65535, got {port}.")
        if len(set(ports.values())) != len(ports):
            raise ServerError(f"The gRPC, HTTP and metrics ports must differ, got {ports}.")
        for name, port in ports.items():
            if not _port_is_free(self.host, port):
                raise ServerError(
                    f"{name} port {port} on {self.host} is already in use; stop what holds it "
                    f"(`attndeploy stop`, or `ss -ltnp | grep {port}`) or choose another port."
                )

    def start(self) -> TritonServer:
        """Launch the server without waiting (see `wait_ready`); checks binary, repo, ports."""
        if self._proc is not None and self._proc.poll() is None:
            raise ServerError(f"This server is already running (pid {self._proc.pid}).")
        binary = find_tritonserver(self._binary)
        if not self.repo.is_dir():
            raise ServerError(f"Model repository {self.repo} is not a directory; build it first.")
        self._check_ports()
        self._cleanup()  # what an earlier run of this object left
        view = make_repository_view(self.repo, self.models)
        shm_prefix = _new_shm_prefix()
        command = self._command(binary, view, shm_prefix)
        if self._log_file is None:
            fd, name = tempfile.mkstemp(prefix=f"tritonserver-{self.grpc_port}-", suffix=".log")
            os.close(fd)
            self._log_file = Path(name)
        try:
            self._log_file.parent.mkdir(parents=True, exist_ok=True)
            with open(self._log_file, "wb") as log:  # one run per log file
                self._proc = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=self._environment(),
                    start_new_session=True,
                    preexec_fn=_die_with_parent_hook() if self._die_with_parent else None,
                )
        except OSError as exc:
            remove_repository_view(view)
            raise ServerError(f"Could not run {binary}: {exc}.") from exc
        self.repository_view, self.shm_prefix = view, shm_prefix
        return self

    def _failure(self, headline: str) -> ServerError:
        """Stop the server and build an error carrying the log tail (read before stopping)."""
        tail = _log_tail(self._log_file) if self._log_file else ""
        self.stop()
        return ServerError(
            f"{headline}\n--- last {LOG_TAIL_LINES} lines of {self._log_file} ---\n{tail}"
        )

    def wait_ready(self, timeout_s: float | None = None, poll_s: float = 0.25) -> None:
        """Block until the server and every model in the repository are ready.

        Raises ServerError (after stopping the server) if the process exits, a model fails to
        load (naming it and the reason), or `timeout_s` (default: the constructor's) passes.
        """
        import tritonclient.grpc as grpcclient  # heavy import (grpc), only when serving

        if self._proc is None:
            raise ServerError("The server was not started; call start() first.")
        timeout_s = self._ready_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        client = grpcclient.InferenceServerClient(self.grpc_url)
        try:
            while True:
                code = self._proc.poll()
                if code is not None:
                    raise self._failure(
                        f"tritonserver exited with code {code} before it was ready."
                    )
                try:
                    failed = self._failed_models(client, self.models)
                    if failed is None:
                        return
                except grpcclient.InferenceServerException:
                    failed = {}  # endpoints not up yet: models are still loading
                if failed:
                    reasons = "\n".join(
                        f"model '{n}' failed to load: {r}" for n, r in failed.items()
                    )
                    raise self._failure(reasons.rstrip())
                if time.monotonic() >= deadline:
                    raise self._failure(
                        f"tritonserver was not ready after {timeout_s:.0f} s; raise the timeout "
                        "if the models are large, else see the log below."
                    )
                time.sleep(poll_s)
        finally:
            client.close()

    @staticmethod
    def _failed_models(client: Any, models: Sequence[str] | None) -> dict[str, str] | None:
        """None when everything is ready, else {model: reason} of models that failed (maybe {})."""
        if not client.is_server_live(client_timeout=2.0):
            return {}
        index = client.get_model_repository_index(as_json=True, client_timeout=2.0)
        entries = index.get("models", [])
        served = {entry["name"] for entry in entries} if models is None else set(models)
        entries = [entry for entry in entries if entry["name"] in served]
        not_ready = {
            name for name in served if not client.is_model_ready(name, client_timeout=2.0)
        }
        if not not_ready and client.is_server_ready(client_timeout=2.0):
            return None
        return {
            entry["name"]: entry.get("reason", "unknown reason (see the log)")
            for entry in entries
            if entry["name"] in not_ready and entry.get("state") == "UNAVAILABLE"
        }

    def stop(self) -> None:
        """SIGTERM the server, SIGKILL its group after `stop_grace_s`, then clean up after it.

        Clean-up (also when the server had already exited): the rest of its process group, its
        shared-memory regions and its repository view. Safe to call again.
        """
        if self._proc is not None and self._proc.poll() is None:
            _terminate(self._proc.pid, self._stop_grace_s)
            try:
                self._proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:  # reaped by _terminate already; no zombie kept
                pass
        self._cleanup()

    def _cleanup(self) -> None:
        if self._proc is not None and self.shm_prefix is not None:
            _end_leftovers(self._proc.pid, self.shm_prefix)
            self.shm_prefix = None
        if self.repository_view is not None:
            remove_repository_view(self.repository_view)
            self.repository_view = None

    def __enter__(self) -> TritonServer:
        self.start()
        try:
            self.wait_ready()
        except BaseException:  # Ctrl-C while loading must not leave a server behind
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


# --------------------------------------------------------------------------- background mode


def default_state_path(repo: Path) -> Path:
    """`<repo>/.attndeploy-server.json`: one background server per repository.

    Triton only treats directories of a repository as models, and the server reads a repository
    view anyway, so the state and log files beside the models are never served.
    """
    return Path(repo) / STATE_FILE_NAME


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
            "`attndeploy serve --background` or pass the right --state-file."
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
    except (UnicodeDecodeError, json.JSONDecodeError):
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
) -> dict[str, Any]:
    """Start a detached server on `repo`, wait until it is ready, record it; return the record.

    The record (JSON, `"format": "attndeploy-server-state"`: pid, host, ports, URLs, repo,
    repository view, shm prefix, log path, binary, start time) is written atomically with mode
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
            raise ServerError(
                f"A server (pid {previous['pid']}, gRPC {previous.get('grpc_url')}) is already "
                f"recorded in {state_path}; stop it with `attndeploy stop` first."
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
    used = _terminate(pid, grace_s)
    leftovers = _clean_up_after(state)
    state_path.unlink(missing_ok=True)
    return {
        **state,
        "signal": used,
        "stop_s": round(time.monotonic() - started, 3),
        "cleaned_up": leftovers,
    }
