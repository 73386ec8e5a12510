"""`TritonServer`: one tritonserver process as a context manager that starts it and waits."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from attndeploy.errors import ServerError
from attndeploy.fsutil import current_umask
from attndeploy.serving.server.binary import _backend_dir_for, find_tritonserver
from attndeploy.serving.server.guard import guard_command
from attndeploy.serving.server.ports import _client_host, _port_is_free, free_ports
from attndeploy.serving.server.processes import (
    _die_with_parent_hook,
    _end_leftovers,
    _new_shm_prefix,
    _terminate,
)
from attndeploy.serving.server.restricted import (
    admin_headers,
    new_admin_key,
    restricted_api_arguments,
)
from attndeploy.serving.server.view import make_repository_view, remove_repository_view

LOG_TAIL_LINES = 30
_RESTRICTION_FLAGS = ("--grpc-restricted-protocol", "--http-restricted-api")


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
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


def open_fresh_log(path: Path) -> int:
    """A new, empty log file at `path` for appending, as a file descriptor: made under a
    temporary name (never through a link: O_EXCL | O_NOFOLLOW) and renamed over `path`, so a
    symlink planted at `path` is replaced, never followed, and its target is left alone."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    flags = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND
             | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    fd = os.open(tmp, flags, 0o666 & ~current_umask())
    try:
        os.replace(tmp, path)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    return fd


class TritonServer:
    """One `tritonserver` process serving `repo`; a context manager that starts it and waits.

    All endpoints (gRPC, HTTP, metrics) bind to `host` (loopback by default). `grpc_url` and
    `http_url` are `host:port` strings as `tritonclient.grpc` / `tritonclient.http` expect them.
    Readiness means: server live and ready, and every served model READY. `models` limits the
    server to those model folders (e.g. to leave out a flavour whose backend this server lacks);
    None serves every model folder of the repository but hidden ones. What is served is fixed at
    start: the repository API cannot load, unload or replace models (see the package docstring).
    The process runs in its own session; `stop()` (or leaving the `with` block) ends it and cleans
    up after it. With `die_with_parent` (the default) Linux sends the server SIGTERM when the
    thread that called `start()` dies, so start it from a thread that outlives it (the main one);
    a server meant to outlive this process (`start_background`) passes False.

    With `guard` (the default) the ports asked for are the request guard's (`guard`), and
    tritonserver itself listens on free loopback ports behind it (`upstream_grpc_port`,
    `upstream_http_port`); the metrics port is the server's own. The log is replaced at each
    start, never written through a symlink.
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
        guard: bool = True,
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
        if any(arg.startswith(_RESTRICTION_FLAGS) for arg in extra_args):
            raise ServerError(
                "extra_args may not set --grpc-restricted-protocol or --http-restricted-api: "
                "the shared-memory, repository, trace and logging APIs stay closed to clients."
            )
        self._extra_args = list(extra_args)
        self._ready_timeout_s = ready_timeout_s
        self._stop_grace_s = stop_grace_s
        self._die_with_parent = die_with_parent
        self.guard = guard
        self.upstream_grpc_port, self.upstream_http_port = grpc_port, http_port
        self._proc: subprocess.Popen[bytes] | None = None
        self._guard_proc: subprocess.Popen[bytes] | None = None
        self.repository_view: Path | None = None  # the folder the server reads, while it runs
        self.shm_prefix: str | None = None  # the python backend's shared-memory prefix
        self.admin_key: str | None = None  # opens the restricted APIs, while it runs

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
    def guard_pid(self) -> int | None:
        """The request guard's pid (None without a guard or before `start()`)."""
        return self._guard_proc.pid if self._guard_proc is not None else None

    @property
    def log_path(self) -> Path | None:
        """The server's stdout+stderr, rewritten at each start (a temp file unless given)."""
        return self._log_file

    # ---- lifecycle
    def admin_headers(self, protocol: str = "grpc") -> dict[str, str] | None:
        """Request headers that open the restricted APIs of this server over `protocol`
        ("grpc" or "http"); None when it is not running."""
        return admin_headers(self.admin_key, protocol)

    def _command(self, binary: Path, view: Path, shm_prefix: str, admin_key: str) -> list[str]:
        # --exit-timeout-secs bounds the drain of in-flight requests on SIGTERM (default 30 s).
        exit_timeout = max(1, int(self._stop_grace_s) - 5)
        inner = "127.0.0.1" if self.guard else self.host  # behind the guard: loopback only
        command = [
            str(binary),
            f"--model-repository={view}",
            "--model-control-mode=none",  # no load/unload/replace through the repository API
            f"--grpc-address={inner}",
            f"--grpc-port={self.upstream_grpc_port}",
            f"--http-address={inner}",
            f"--http-port={self.upstream_http_port}",
            f"--metrics-address={self.host}",
            f"--metrics-port={self.metrics_port}",
            "--allow-gpu-metrics=false",  # quiets the NVML/DCGM warnings of CPU-only machines
            "--strict-readiness=true",
            "--exit-on-error=false",  # keep a failed model's reason readable from the index
            f"--exit-timeout-secs={exit_timeout}",
            f"--backend-config=python,shm-region-prefix-name={shm_prefix}",
            *restricted_api_arguments(admin_key),  # no client registers shared memory
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
        if self.guard:  # tritonserver behind the guard, on loopback ports no one asked for
            taken = {self.grpc_port, self.http_port, self.metrics_port}
            self.upstream_grpc_port, self.upstream_http_port = [
                port for port in free_ports(5) if port not in taken][:2]
        view = make_repository_view(self.repo, self.models)
        shm_prefix, admin_key = _new_shm_prefix(), new_admin_key()
        command = self._command(binary, view, shm_prefix, admin_key)
        if self._log_file is None:
            fd, name = tempfile.mkstemp(prefix=f"tritonserver-{self.grpc_port}-", suffix=".log")
            os.close(fd)
            self._log_file = Path(name)
        try:
            log = open_fresh_log(self._log_file)  # one run per log file
        except OSError as exc:
            remove_repository_view(view)
            raise ServerError(f"Could not write the server log {self._log_file}: "
                              f"{exc.strerror or exc}.") from exc
        try:
            self._proc = self._spawn(command, log)
            if self.guard:
                self._guard_proc = self._spawn(guard_command(
                    host=self.host, grpc_port=self.grpc_port, http_port=self.http_port,
                    upstream_grpc_port=self.upstream_grpc_port,
                    upstream_http_port=self.upstream_http_port, server_pid=self._proc.pid,
                    marker=shm_prefix), log)
        except OSError as exc:
            if self._proc is not None:
                _terminate(self._proc.pid, self._stop_grace_s)
            remove_repository_view(view)
            raise ServerError(f"Could not run {command[0]}: {exc}.") from exc
        finally:
            os.close(log)
        self.repository_view, self.shm_prefix, self.admin_key = view, shm_prefix, admin_key
        return self

    def _spawn(self, command: list[str], log: int) -> subprocess.Popen[bytes]:
        """One process of this server, in a session of its own, writing to the log."""
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self._environment(),
            start_new_session=True,
            preexec_fn=_die_with_parent_hook() if self._die_with_parent else None,
        )

    def _failure(self, headline: str) -> ServerError:
        """Stop the server and build an error carrying the log tail (read before stopping)."""
        tail = log_tail(self._log_file) if self._log_file else ""
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
                if self._guard_proc is not None and self._guard_proc.poll() is not None:
                    raise self._failure(
                        f"the request guard exited with code {self._guard_proc.returncode} "
                        "before the server was ready."
                    )
                try:
                    failed = self._failed_models(client, self.models, self.admin_headers())
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
    def _failed_models(
        client: Any, models: Sequence[str] | None, headers: dict[str, str] | None
    ) -> dict[str, str] | None:
        """None when everything is ready, else {model: reason} of models that failed (maybe {}).

        The repository index is a restricted API: `headers` carry the admin key.
        """
        if not client.is_server_live(client_timeout=2.0):
            return {}
        index = client.get_model_repository_index(headers=headers, as_json=True,
                                                  client_timeout=2.0)
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
        for proc in (self._guard_proc, self._proc):  # the guard first: no request gets in
            if proc is not None and proc.poll() is None:
                _terminate(proc.pid, self._stop_grace_s)
                try:
                    proc.wait(timeout=1.0)
                except subprocess.TimeoutExpired:  # reaped by _terminate already
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
