"""The local tritonserver wrapper against the real binary from the nvidia-pytriton wheel.

Each server start costs a few seconds (and a stop 2-5 s), so servers are shared where the tests
allow it and every one of them is stopped in a `finally` or fixture finalizer.
"""

from __future__ import annotations

import json
import os
import re
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from attndeploy.errors import ServerError
from attndeploy.serving.server import (
    ENV_BINARY,
    STATE_FORMAT,
    TritonServer,
    default_state_path,
    find_tritonserver,
    free_port,
    free_ports,
    prepare_backend_dir,
    start_background,
    stop_background,
)

IDENTITY_CONFIG = """\
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
dynamic_batching { }
instance_group [ { kind: KIND_CPU count: 1 } ]
"""

IDENTITY_MODEL = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            out = pb_utils.Tensor("OUTPUT0", x)
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
"""

BROKEN_MODEL = """\
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("weights.bin is missing")

    def execute(self, requests):
        return []
"""


SLOW_MODEL = """\
import time


class TritonPythonModel:
    def initialize(self, args):
        time.sleep(120)

    def execute(self, requests):
        return []
"""


def write_python_model(repo: Path, name: str, model_py: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(IDENTITY_CONFIG)
    (repo / name / "1" / "model.py").write_text(model_py)


def port_is_listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def process_is_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture(scope="module")
def identity_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("repo")
    write_python_model(repo, "identity", IDENTITY_MODEL)
    return repo


@pytest.fixture
def server_on_free_ports(identity_repo: Path, tmp_path: Path) -> Iterator[TritonServer]:
    grpc, http, metrics = free_ports()
    server = TritonServer(
        identity_repo,
        grpc_port=grpc,
        http_port=http,
        metrics_port=metrics,
        log_file=tmp_path / "server.log",
    )
    yield server
    server.stop()


# --------------------------------------------------------------------------- no server needed


def test_an_explicit_binary_that_does_not_exist_is_a_server_error(tmp_path: Path) -> None:
    with pytest.raises(ServerError, match="not found"):
        find_tritonserver(tmp_path / "no-such-tritonserver")


def test_the_environment_variable_is_honoured_and_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_BINARY, str(tmp_path / "missing"))
    with pytest.raises(ServerError, match=ENV_BINARY):
        find_tritonserver()


def test_without_arguments_the_wheel_binary_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_BINARY, raising=False)
    binary = find_tritonserver()
    assert binary.name == "tritonserver" and os.access(binary, os.X_OK)


def test_backend_dir_holds_symlinks_into_the_wheel_and_is_idempotent(tmp_path: Path) -> None:
    first = prepare_backend_dir(tmp_path / "backends")
    second = prepare_backend_dir(tmp_path / "backends")
    assert first == second == tmp_path / "backends"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    names = {"libtriton_python.so", "triton_python_backend_utils.py", "triton_python_backend_stub"}
    assert {p.name for p in (first / "python").iterdir()} == names
    for link in (first / "python").iterdir():
        assert link.is_symlink() and link.resolve().is_file()
    stub = (first / "python" / "triton_python_backend_stub").resolve()
    assert stub.parent.name == version


def test_a_busy_port_is_named_before_anything_starts(identity_repo: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        grpc, metrics = free_ports(2)
        server = TritonServer(identity_repo, grpc_port=grpc, http_port=port, metrics_port=metrics)
        with pytest.raises(ServerError, match=str(port)):
            server.start()
        assert server.pid is None


def test_a_missing_binary_fails_start(identity_repo: Path, tmp_path: Path) -> None:
    server = TritonServer(identity_repo, binary=tmp_path / "nope", grpc_port=free_port())
    with pytest.raises(ServerError, match="not found"):
        server.start()
    assert server.pid is None


def test_stopping_an_unrecorded_background_server_says_so(tmp_path: Path) -> None:
    with pytest.raises(ServerError, match="No background server"):
        stop_background(tmp_path / "state.json")


def test_a_stale_record_is_removed_with_a_clear_error(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", ""])
    dead.wait()
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"format": STATE_FORMAT, "pid": dead.pid, "grpc_port": 1,
                                 "shm_prefix": "attndeploy_0123456789ab_",
                                 "repository_view": str(tmp_path / "attndeploy-models-gone")}))
    with pytest.raises(ServerError, match="no longer running .* stale record"):
        stop_background(state)
    assert not state.exists()


# --------------------------------------------------------------------------- real servers


@pytest.mark.integration
def test_server_serves_grpc_inference_then_stops_and_frees_its_port(
    server_on_free_ports: TritonServer,
) -> None:
    import tritonclient.grpc as grpcclient

    server = server_on_free_ports
    with server:
        assert server.pid is not None
        client = grpcclient.InferenceServerClient(server.grpc_url)
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        inp = grpcclient.InferInput("INPUT0", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        result = client.infer("identity", [inp])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)
        client.close()
        pid, view = server.pid, server.repository_view
    assert process_is_gone(pid)
    assert view is not None and not view.exists()
    assert not port_is_listening(server.grpc_port)
    assert not port_is_listening(server.http_port)


@pytest.mark.integration
def test_a_model_failing_at_initialize_is_named_by_wait_ready(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_python_model(repo, "broken", BROKEN_MODEL)
    grpc, http, metrics = free_ports()
    server = TritonServer(
        repo, grpc_port=grpc, http_port=http, metrics_port=metrics, log_file=tmp_path / "log"
    )
    started = time.monotonic()
    try:
        server.start()
        with pytest.raises(ServerError, match="model 'broken' failed to load") as info:
            server.wait_ready(timeout_s=60)
        assert "weights.bin is missing" in str(info.value)
        assert time.monotonic() - started < 60
        assert server.pid is not None and process_is_gone(server.pid)
    finally:
        server.stop()


@pytest.mark.integration
def test_wait_ready_gives_up_after_its_timeout_and_stops_the_server(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_python_model(repo, "slow", SLOW_MODEL)
    grpc, http, metrics = free_ports()
    server = TritonServer(
        repo, grpc_port=grpc, http_port=http, metrics_port=metrics, log_file=tmp_path / "log"
    )
    started = time.monotonic()
    try:
        server.start()
        with pytest.raises(ServerError, match="not ready after 3 s"):
            server.wait_ready(timeout_s=3)
        assert time.monotonic() - started < 30
        assert server.pid is not None and process_is_gone(server.pid)
    finally:
        server.stop()


@pytest.mark.integration
def test_background_start_records_the_server_and_stop_removes_it(identity_repo: Path) -> None:
    grpc, http, metrics = free_ports()
    state_path = default_state_path(identity_repo)
    state = start_background(
        identity_repo, grpc_port=grpc, http_port=http, metrics_port=metrics, timeout_s=60
    )
    try:
        assert json.loads(state_path.read_text()) == state
        assert state["format"] == STATE_FORMAT
        assert stat.S_IMODE(state_path.stat().st_mode) == 0o600
        assert Path(state["repository_view"]).is_dir()
        assert state["grpc_url"] == f"127.0.0.1:{grpc}"
        assert Path(state["log_path"]).is_file()
        assert port_is_listening(grpc)
        # ... and a second start names the exact command that stops the first
        stop_words = re.escape(f"`attndeploy stop --repo {identity_repo.resolve()}`")
        with pytest.raises(ServerError, match=f"already.*{stop_words}"):
            start_background(identity_repo, grpc_port=free_port(), timeout_s=60)
        stopped = stop_background(state_path)
    except BaseException:
        if state_path.exists():
            stop_background(state_path)
        raise
    assert stopped["pid"] == state["pid"] and stopped["signal"] == "SIGTERM"
    assert not state_path.exists()
    assert not Path(state["repository_view"]).exists()
    assert process_is_gone(state["pid"])
    assert not port_is_listening(grpc)
