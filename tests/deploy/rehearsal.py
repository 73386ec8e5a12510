"""A local rehearsal of the Deployment's pod and its Service, on the real tritonserver.

What a cluster would do with the manifests is done here with the same values, mapped to this
machine: the models image is built by following models.Dockerfile's COPY lines (its context is
the repository), the initContainer's command runs as written with its mount paths mapped to
local folders, and tritonserver runs with the container's command line, where only these are
changed: the repository path (the volume mount -> its local folder), the ports (each named
container port -> a free local one), the addresses (0.0.0.0 -> 127.0.0.1: nothing here listens
beyond loopback), and one flag is added, `--backend-directory` (the wheel's python backend; the
NGC image has its own). The container's command runs as written (its start script draws the admin
key and execs tritonserver, found on PATH as in the image), with those args. As the kubelet does,
the container's `env` values are set and its `$(VAR)` references expanded; any other env (a pod
field, a secret) is refused, not rehearsed. The Service is a local TCP forwarder per service
port, on a free port, whose target is found the way Kubernetes finds it: `targetPort` name -> the
container port of that name.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attndeploy.serving.server import find_tritonserver, free_ports, prepare_backend_dir

LOCAL_HOST = "127.0.0.1"
PROBE_BUDGET_S = 180.0  # the startupProbe allows 300 s; the tiny test models need a few


def build_models_image(dockerfile: Path, context: Path, root: Path) -> Path:
    """Follow the Dockerfile's COPY lines into `root` (the image's file system); return root."""
    for line in dockerfile.read_text().splitlines():
        parts = line.split()
        if parts and parts[0] == "COPY":
            source, destination = parts[1], parts[2]
            shutil.copytree(context / source, root / destination.lstrip("/"))
    return root


class PathMap:
    """Container paths -> local ones: volume mounts first (longest match), else the image."""

    def __init__(self, mounts: dict[str, Path], image_root: Path | None) -> None:
        self.mounts = dict(sorted(mounts.items(), key=lambda item: -len(item[0])))
        self.image_root = image_root

    def __call__(self, path: str) -> str:
        for mount, local in self.mounts.items():
            if path == mount or path.startswith(mount.rstrip("/") + "/"):
                return str(local) + path[len(mount.rstrip("/")):]
        if self.image_root is not None:
            return str(self.image_root) + path
        raise AssertionError(f"{path} is neither mounted nor in an image")


def local_volumes(pod: dict[str, Any], root: Path) -> dict[str, Path]:
    """A local folder per emptyDir volume of the pod (others are not rehearsed here)."""
    folders = {}
    for volume in pod.get("volumes", []):
        if "emptyDir" in volume and volume["emptyDir"].get("medium") != "Memory":
            folders[volume["name"]] = root / "volumes" / volume["name"]
            folders[volume["name"]].mkdir(parents=True)
    return folders


def mounts_of(container: dict[str, Any], volumes: dict[str, Path]) -> dict[str, Path]:
    return {m["mountPath"]: volumes[m["name"]] for m in container.get("volumeMounts", [])
            if m["name"] in volumes}


def run_init_container(container: dict[str, Any], volumes: dict[str, Path],
                       image_root: Path) -> None:
    paths = PathMap(mounts_of(container, volumes), image_root)
    command = [container["command"][0],
               *(paths(arg) if arg.startswith("/") else arg for arg in container["command"][1:])]
    subprocess.run(command, check=True, capture_output=True, timeout=60)


def container_env(container: dict[str, Any]) -> dict[str, str]:
    """The container's `env` as the kubelet resolves it: plain values only (a `valueFrom`, such
    as a pod field, is not rehearsed here)."""
    env = {}
    for entry in container.get("env", []):
        if "value" in entry:
            env[entry["name"]] = entry["value"]
        else:
            raise AssertionError(f"env {entry} is not rehearsed")
    return env


def expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes' expansion of a container arg: `$(VAR)` of a defined VAR becomes its value,
    `$$` becomes `$`, anything else stays as written."""
    def one(match: re.Match[str]) -> str:
        if match[0] == "$$":
            return "$"
        return env.get(match[1], match[0])

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", one, value)


def server_command(container: dict[str, Any], volumes: dict[str, Path],
                   ports: dict[int, int], backend_root: Path,
                   env: dict[str, str] | None = None) -> list[str]:
    """The container's command line, mapped to this machine (see the module docstring): its
    command as written, its args mapped."""
    paths = PathMap(mounts_of(container, volumes), None)
    command = [expand(word, env or {}) for word in container["command"]]
    for arg in container["args"]:
        flag, _, value = expand(arg, env or {}).partition("=")
        if flag.endswith("-port"):
            value = str(ports[int(value)])
        elif flag.endswith("-address"):
            value = LOCAL_HOST if value == "0.0.0.0" else value
        elif value.startswith("/"):
            value = paths(value)
        command.append(f"{flag}={value}")
    return command + [f"--backend-directory={prepare_backend_dir(backend_root)}"]


class _Forward(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        target = self.server.target  # type: ignore[attr-defined]
        with socket.create_connection(target, timeout=10) as upstream:
            upstream.settimeout(None)
            self.request.settimeout(None)

            def pipe(source: socket.socket, sink: socket.socket) -> None:
                try:
                    while data := source.recv(65536):
                        sink.sendall(data)
                except OSError:
                    pass
                with contextlib.suppress(OSError):
                    sink.shutdown(socket.SHUT_WR)

            back = threading.Thread(target=pipe, args=(upstream, self.request), daemon=True)
            back.start()
            pipe(self.request, upstream)
            back.join(timeout=30)


class _Forwarder(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


@dataclass
class LocalPod:
    """The rehearsed pod: the server process and where each port landed on this machine."""

    process: subprocess.Popen
    command: list[str]
    container_ports: dict[str, int]  # port name -> containerPort (as in the manifest)
    local_ports: dict[int, int]  # containerPort -> local port
    log: Path
    services: dict[int, int] = field(default_factory=dict)  # Service port -> local port
    env: dict[str, str] = field(default_factory=dict)  # the container's env, resolved

    def local_port(self, port: int | str) -> int:
        """The local port for a probe's or a Service's `port` / `targetPort` (number or name)."""
        number = self.container_ports[port] if isinstance(port, str) else port
        return self.local_ports[number]

    def url(self, port: int | str, path: str) -> str:
        return f"http://{LOCAL_HOST}:{self.local_port(port)}{path}"

    def argv(self) -> list[str]:
        """The server process's command line now. Once the start script has exec'd (the server
        answers), the process is tritonserver itself: this is what whoever may `kubectl exec`
        into the pod reads from /proc/1/cmdline."""
        return Path(f"/proc/{self.process.pid}/cmdline").read_bytes().decode().split("\0")[:-1]


def http_status(url: str, *, method: str = "GET", timeout: float = 2.0,
                headers: dict[str, str] | None = None,
                data: bytes | None = None) -> tuple[int, bytes]:
    if data is None and method == "POST":
        data = b""
    request = urllib.request.Request(url, method=method, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return 0, b""


def wait_for_probe(pod: LocalPod, probe: dict[str, Any], budget_s: float) -> float:
    """Poll the probe's httpGet until it answers 200; the seconds it took."""
    get = probe["httpGet"]
    url = pod.url(get["port"], get["path"])
    started = time.monotonic()
    while time.monotonic() - started < budget_s:
        if pod.process.poll() is not None:
            raise AssertionError(f"tritonserver exited ({pod.process.returncode}):\n"
                                 f"{pod.log.read_text(errors='replace')[-3000:]}")
        if http_status(url)[0] == 200:
            return time.monotonic() - started
        time.sleep(0.25)
    raise AssertionError(f"{url} never answered 200 in {budget_s} s:\n"
                         f"{pod.log.read_text(errors='replace')[-3000:]}")


@contextlib.contextmanager
def rehearse(deployment: dict[str, Any], service: dict[str, Any], models_dockerfile: Path,
             repo: Path, workdir: Path) -> Iterator[LocalPod]:
    """Run the Deployment's pod and its Service locally; stop everything on exit."""
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    image_root = build_models_image(models_dockerfile, repo, workdir / "models-image")
    volumes = local_volumes(pod, workdir)
    for init in pod.get("initContainers", []):
        run_init_container(init, volumes, image_root)
    container_ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    local_ports = dict(zip(container_ports.values(), free_ports(len(container_ports)),
                           strict=True))
    pod_env = container_env(container)
    command = server_command(container, volumes, local_ports, workdir / "backends", pod_env)
    log = workdir / "tritonserver.log"
    # tritonserver on PATH, as in the image; this Python first, for the python backend's stub
    env = {**os.environ, **pod_env,
           "PATH": os.pathsep.join([str(find_tritonserver().parent),
                                    str(Path(sys.executable).parent),
                                    os.environ.get("PATH", "")])}
    with open(log, "wb") as handle:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=handle,
                                   stderr=subprocess.STDOUT, env=env, start_new_session=True)
    local = LocalPod(process, command, container_ports, local_ports, log, env=pod_env)
    forwarders: list[_Forwarder] = []
    try:
        for port in service["spec"]["ports"]:
            forwarder = _Forwarder((LOCAL_HOST, 0), _Forward)
            forwarder.target = (LOCAL_HOST, local.local_port(port["targetPort"]))  # type: ignore[attr-defined]
            threading.Thread(target=forwarder.serve_forever, daemon=True).start()
            forwarders.append(forwarder)
            local.services[port["port"]] = forwarder.server_address[1]
        yield local
    finally:
        for forwarder in forwarders:
            forwarder.shutdown()
            forwarder.server_close()
        stop(process)


def stop(process: subprocess.Popen, grace_s: float = 20.0) -> None:
    """SIGTERM the server's process group (its python stubs included), SIGKILL it if it stays."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=5)
