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

`TritonServer` runs one server as a context manager; `start_background` / `stop_background` run one
detached and remember it in a small JSON state file (for `attndeploy serve --background` / `stop`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from attndeploy.errors import ServerError

ENV_BINARY = "ATTNDEPLOY_TRITONSERVER"
STATE_FILE_NAME = ".attndeploy-server.json"
LOG_TAIL_LINES = 30
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


def _pid_alive(pid: int) -> bool:
    """Whether `pid` still runs (reaping it first if it is our own exited child)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass  # not our child: only the signal probe below can tell
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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


# --------------------------------------------------------------------------- the server


class TritonServer:
    """One `tritonserver` process serving `repo`; a context manager that starts it and waits.

    All endpoints (gRPC, HTTP, metrics) bind to `host` (loopback by default). `grpc_url` and
    `http_url` are `host:port` strings as `tritonclient.grpc` / `tritonclient.http` expect them.
    Readiness means: server live and ready, and every served model READY. `models` limits the
    server to those models (explicit model control, e.g. to leave out a flavour whose backend
    this server lacks); None serves every model of the repository.
    The process runs in its own session; `stop()` (or leaving the `with` block) ends it.
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
    ) -> None:
        self.repo = Path(repo)
        self.models = list(models) if models is not None else None
        self.grpc_port, self.http_port, self.metrics_port = grpc_port, http_port, metrics_port
        self.host = host
        self._log_file = Path(log_file) if log_file is not None else None
        self._binary = binary
        self._extra_args = list(extra_args)
        self._ready_timeout_s = ready_timeout_s
        self._stop_grace_s = stop_grace_s
        self._proc: subprocess.Popen[bytes] | None = None

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
    def _command(self, binary: Path) -> list[str]:
        # --exit-timeout-secs bounds the drain of in-flight requests on SIGTERM (default 30 s).
        exit_timeout = max(1, int(self._stop_grace_s) - 5)
        command = [
            str(binary),
            f"--model-repository={self.repo.resolve()}",
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
        ]
        if self.models is not None:
            command.append("--model-control-mode=explicit")
            command.extend(f"--load-model={name}" for name in self.models)
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

    def start(self) -> TritonServer:
        """Launch the server without waiting (see `wait_ready`); checks binary, repo, ports."""
        if self._proc is not None and self._proc.poll() is None:
            raise ServerError(f"This server is already running (pid {self._proc.pid}).")
        binary = find_tritonserver(self._binary)
        if not self.repo.is_dir():
            raise ServerError(f"Model repository {self.repo} is not a directory; build it first.")
        ports = {"gRPC": self.grpc_port, "HTTP": self.http_port, "metrics": self.metrics_port}
        if len(set(ports.values())) != len(ports):
            raise ServerError(f"The gRPC, HTTP and metrics ports must differ, got {ports}.")
        for name, port in ports.items():
            if not _port_is_free(self.host, port):
                raise ServerError(
                    f"{name} port {port} on {self.host} is already in use; stop what holds it "
                    f"(`attndeploy stop`, or `ss -ltnp | grep {port}`) or choose another port."
                )
        command = self._command(binary)
        if self._log_file is None:
            fd, name = tempfile.mkstemp(prefix=f"tritonserver-{self.grpc_port}-", suffix=".log")
            os.close(fd)
            self._log_file = Path(name)
        self._log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self._log_file, "wb") as log:  # one run per log file
            try:
                self._proc = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=self._environment(),
                    start_new_session=True,
                )
            except OSError as exc:
                raise ServerError(f"Could not run {binary}: {exc}.") from exc
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
        """SIGTERM the server, SIGKILL it after `stop_grace_s`; a no-op if it is not running."""
        if self._proc is None or self._proc.poll() is not None:
            return
        _terminate(self._proc.pid, self._stop_grace_s)
        try:
            self._proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:  # reaped by _terminate already; keep no zombie around
            pass

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

    Triton only treats directories of a repository as models, so the state and log files beside
    them are ignored by the server.
    """
    return Path(repo) / STATE_FILE_NAME


def _write_state(path: Path, state: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    os.replace(tmp, path)


def _read_state(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ServerError(
            f"No background server is recorded at {path}; start one with "
            "`attndeploy serve --background` or pass the right --state file."
        )
    try:
        state = json.loads(path.read_text())
        int(state["pid"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        path.unlink(missing_ok=True)
        raise ServerError(f"State file {path} is corrupt ({exc}); removed it.") from exc
    return state


def _is_our_server(state: dict[str, Any]) -> bool:
    """The recorded pid still runs *and* is that tritonserver (not a process reusing the pid)."""
    pid = int(state["pid"])
    if not _pid_alive(pid):
        return False
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return True  # no /proc (not Linux): trust the live pid
    return any(arg.endswith(b"tritonserver") for arg in argv) and (
        f"--grpc-port={state.get('grpc_port')}".encode() in argv
    )


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

    The record (JSON: pid, host, ports, URLs, repo, log path, binary, start time) is written
    atomically to `state_path`, by default `default_state_path(repo)` =
    `<repo>/.attndeploy-server.json`; the log defaults to the same path with suffix `.log`.
    A live server already recorded there is an error; a stale record is replaced.
    """
    repo = Path(repo).resolve()
    state_path = Path(state_path) if state_path is not None else default_state_path(repo)
    if state_path.is_file():
        try:
            previous = _read_state(state_path)
        except ServerError:
            previous = None  # corrupt record, already removed
        if previous is not None and _is_our_server(previous):
            raise ServerError(
                f"A server (pid {previous['pid']}, gRPC {previous.get('grpc_url')}) is already "
                f"recorded in {state_path}; stop it with `attndeploy stop` first."
            )
        state_path.unlink(missing_ok=True)
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
    )
    server.start()
    server.wait_ready(timeout_s)  # stops the server itself on failure
    state = {
        "pid": server.pid,
        "host": host,
        "grpc_port": grpc_port,
        "http_port": http_port,
        "metrics_port": metrics_port,
        "grpc_url": server.grpc_url,
        "http_url": server.http_url,
        "repo": str(repo),
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
    """Stop the server recorded in `state_path` (SIGTERM, then SIGKILL) and remove the record.

    Returns the record plus `signal` (the signal that ended it) and `stop_s`. A missing record,
    or one whose process is gone (the stale file is removed), is a ServerError.
    """
    state_path = Path(state_path)
    state = _read_state(state_path)
    pid = int(state["pid"])
    if not _is_our_server(state):
        state_path.unlink(missing_ok=True)
        raise ServerError(
            f"The server recorded in {state_path} (pid {pid}) is not running any more; "
            "removed the stale record."
        )
    started = time.monotonic()
    used = _terminate(pid, grace_s)
    state_path.unlink(missing_ok=True)
    return {**state, "signal": used, "stop_s": round(time.monotonic() - started, 3)}
