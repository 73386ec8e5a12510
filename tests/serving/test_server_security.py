"""Hardening of `attndeploy serve` / `stop`: no client can change what is served, the state file
never replaces or deletes a file that is not ours, nothing outlives a stopped or killed server,
ports are checked up front, and a non-loopback host is warned about.

The tests that start tritonserver are marked `integration` (three server starts in all).
"""

from __future__ import annotations

import base64
import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from attndeploy.errors import ServerError
from attndeploy.serving.server import (
    STATE_FORMAT,
    TritonServer,
    exposure_warning,
    free_ports,
    is_loopback_host,
    make_repository_view,
    remove_repository_view,
    start_background,
    stop_background,
)
from attndeploy.serving.server.launch import servable_models
from attndeploy.serving.server.restricted import admin_headers
from tests.cli.test_train_cli import assert_one_line_error, parse_json, run_cli
from tests.serving.test_server import IDENTITY_CONFIG, IDENTITY_MODEL, write_python_model

STAGING = ".identity.4242.k3j4.tmp"  # what a `package --force` killed mid-write leaves


def group_members(pgid: int) -> list[int]:
    """Running (not zombie) processes of process group `pgid`, from /proc.

    A zombie has exited and holds no memory; it only waits for its parent (init, for orphans)
    to reap it, which no stop command can hurry.
    """
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        state, _, group = text[text.rindex(")") + 2 :].split()[:3]
        if int(group) == pgid and state != "Z":
            members.append(int(entry.name))
    return members


def shm_files(prefix: str) -> list[str]:
    return [name for name in os.listdir("/dev/shm") if name.startswith(prefix)]


def wait_for(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def a_record(**fields) -> str:
    record = {"format": STATE_FORMAT, "pid": 2, "grpc_port": 1, "shm_prefix":
              "attndeploy_000000000000_", "repository_view": "/nonexistent/attndeploy-models-x"}
    return json.dumps({**record, **fields})


@pytest.fixture
def repo_with_staging(tmp_path: Path) -> Path:
    """An identity model and a staging copy of it (same files, hidden folder name)."""
    repo = tmp_path / "repo"
    write_python_model(repo, "identity", IDENTITY_MODEL)
    (repo / STAGING / "1").mkdir(parents=True)
    (repo / STAGING / "config.pbtxt").write_text(IDENTITY_CONFIG)
    (repo / STAGING / "1" / "model.py").write_text(IDENTITY_MODEL)
    return repo


# --------------------------------------------------------------------------- no server needed


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.3.2.1", True), ("::1", True), ("localhost", True),
     ("0.0.0.0", False), ("::", False), ("", False), ("10.1.2.3", False),
     ("example.internal", False)],
)
def test_only_loopback_hosts_go_without_a_warning(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback
    warning = exposure_warning(host)
    assert (warning is None) is loopback
    if warning is not None:
        assert "\n" not in warning and "authentication" in warning and "proxy" in warning


def test_serve_on_a_non_loopback_host_prints_a_one_line_warning_first(tmp_path: Path) -> None:
    result = run_cli("serve", "--host", "0.0.0.0", "--repo", "missing", cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    warning, error = result.stderr.strip().splitlines()
    assert warning.startswith("warning: --host 0.0.0.0 is not a loopback address")
    assert "TLS and authentication" in warning
    assert error.startswith("error (server): ")


def test_serve_on_loopback_prints_no_warning(tmp_path: Path) -> None:
    result = run_cli("serve", "--host", "127.0.0.1", "--repo", "missing", cwd=tmp_path)
    assert_one_line_error(result, "server", "does not exist")


@pytest.mark.parametrize(
    ("option", "value"),
    [("--grpc-port", "70000"), ("--grpc-port", "0"), ("--http-port", "65536"),
     ("--metrics-port", "-1")],
)
def test_serve_refuses_a_port_outside_1_to_65535_as_a_usage_error(
    tmp_path: Path, option: str, value: str
) -> None:
    result = run_cli("serve", option, value, cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error (usage): ") and option in lines[0]


def test_the_library_refuses_a_port_outside_1_to_65535_before_starting(
    repo_with_staging: Path,
) -> None:
    server = TritonServer(repo_with_staging, grpc_port=70000, http_port=1, metrics_port=2)
    with pytest.raises(ServerError, match="between 1 and 65535, got 70000"):
        server.start()
    assert server.pid is None


def test_serve_on_an_empty_repository_says_it_has_no_models_and_how_to_add_one(
    tmp_path: Path,
) -> None:
    (tmp_path / "repo").mkdir()
    result = run_cli("serve", "--repo", "repo", cwd=tmp_path)
    assert_one_line_error(result, "server", "has no models", "attndeploy package")
    assert not result.stderr.rstrip().endswith(":")


def test_hidden_staging_folders_are_never_servable(repo_with_staging: Path) -> None:
    models, skipped = servable_models(repo_with_staging)
    assert models == ["identity"] and skipped == {}
    with pytest.raises(ServerError, match="no model"):
        servable_models(repo_with_staging, [STAGING])


def test_the_repository_view_links_only_visible_model_folders_and_removal_spares_them(
    repo_with_staging: Path,
) -> None:
    (repo_with_staging / ".attndeploy-server.json").write_text("{}")  # files are not models
    view = make_repository_view(repo_with_staging)
    try:
        assert stat.S_IMODE(view.stat().st_mode) == 0o700
        assert [p.name for p in view.iterdir()] == ["identity"]
        link = view / "identity"
        assert link.is_symlink() and link.resolve() == (repo_with_staging / "identity").resolve()
    finally:
        assert remove_repository_view(view)
    assert not view.exists()
    assert (repo_with_staging / "identity" / "1" / "model.py").is_file()
    assert not remove_repository_view(repo_with_staging)  # not a view: left alone
    assert (repo_with_staging / "identity").is_dir()


def test_views_of_killed_servers_are_removed_when_the_next_one_is_made(
    repo_with_staging: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the views of this test only
    orphan = make_repository_view(repo_with_staging)  # no process serves it
    hour_ago = time.time() - 3600
    os.utime(orphan, (hour_ago, hour_ago))
    young = make_repository_view(repo_with_staging)  # may be about to be served: kept
    newest = make_repository_view(repo_with_staging)
    assert not orphan.exists() and young.is_dir() and newest.is_dir()
    assert (repo_with_staging / "identity" / "1" / "model.py").is_file()


@pytest.mark.parametrize("name", [STAGING, "../repo", "identity/1", "", "missing"])
def test_a_model_that_is_not_a_visible_folder_of_the_repository_is_refused(
    repo_with_staging: Path, name: str
) -> None:
    with pytest.raises(ServerError, match="not a model folder"):
        make_repository_view(repo_with_staging, [name])


def test_extra_args_cannot_turn_the_repository_api_back_on(repo_with_staging: Path) -> None:
    with pytest.raises(ServerError, match="model-control-mode"):
        TritonServer(repo_with_staging, extra_args=["--model-control-mode=explicit"])


@pytest.mark.parametrize(
    ("name", "content"),
    [("config.json", b'{"d_model": 16, "heads": 2}\n'),
     ("model.onnx", b"\x08\x07\x12\x07pytorch" + bytes(range(256))),
     ("old-record.json", b'{"pid": 123, "grpc_port": 8001}\n'),  # no format marker
     ("deep.json", b"[" * 60_000 + b"]" * 60_000)],  # nested past Python's recursion limit
)
def test_stop_refuses_a_file_that_is_not_a_state_record_and_leaves_it_alone(
    tmp_path: Path, name: str, content: bytes
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ServerError, match="not an attndeploy server state file"):
        stop_background(path)
    assert path.read_bytes() == content


def test_background_start_refuses_to_overwrite_a_file_that_is_not_a_state_record(
    repo_with_staging: Path, tmp_path: Path
) -> None:
    path = tmp_path / "some.onnx"
    content = b"\x08\x07\x12\x07pytorch" + bytes(range(256))
    path.write_bytes(content)
    with pytest.raises(ServerError, match="not an attndeploy server state file"):
        start_background(repo_with_staging, state_path=path, grpc_port=free_ports(1)[0])
    assert path.read_bytes() == content
    assert not (tmp_path / "some.log").exists()  # refused before anything started


def test_the_cli_leaves_a_checkpoint_config_and_an_onnx_file_given_as_state_file_alone(
    repo_with_staging: Path, tmp_path: Path
) -> None:
    (tmp_path / "ckpt").mkdir()
    config = tmp_path / "ckpt" / "config.json"
    config.write_text('{"d_model": 16}\n')
    onnx = tmp_path / "some.onnx"
    onnx.write_bytes(b"\x08\x07\x12\x07pytorch")
    stop = run_cli("stop", "--state-file", "ckpt/config.json", cwd=tmp_path)
    assert_one_line_error(stop, "server", "not an attndeploy server state file", "untouched")
    serve = run_cli("serve", "--repo", str(repo_with_staging), "--background", "--state-file",
                    "some.onnx", cwd=tmp_path)
    assert_one_line_error(serve, "server", "not an attndeploy server state file", "untouched")
    assert config.read_text() == '{"d_model": 16}\n'
    assert onnx.read_bytes() == b"\x08\x07\x12\x07pytorch"


def test_a_corrupt_attndeploy_record_is_removed(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text(a_record(pid="twelve"))
    with pytest.raises(ServerError, match="corrupt attndeploy record; removed it"):
        stop_background(path)
    assert not path.exists()


# --------------------------------------------------------------------------- real servers


@pytest.fixture(scope="module")
def locked_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    """A foreground server on a repository holding `identity` and a staging copy of it."""
    root = tmp_path_factory.mktemp("locked")
    repo = root / "repo"
    write_python_model(repo, "identity", IDENTITY_MODEL)
    write_python_model(repo, STAGING, IDENTITY_MODEL)
    grpc, http, metrics = free_ports()
    with TritonServer(repo, grpc_port=grpc, http_port=http, metrics_port=metrics,
                      log_file=root / "server.log") as server:
        yield server


def infer_identity(url: str) -> np.ndarray:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    try:
        x = np.arange(4, dtype=np.float32).reshape(1, 4)
        inp = grpcclient.InferInput("INPUT0", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        out = client.infer("identity", [inp]).as_numpy("OUTPUT0")
        np.testing.assert_array_equal(out, x)
        return out
    finally:
        client.close()


@pytest.mark.integration
def test_no_client_can_load_unload_or_replace_a_model_over_http_or_grpc(
    locked_server: TritonServer, tmp_path: Path
) -> None:
    import tritonclient.grpc as grpcclient

    marker = tmp_path / "model_py_ran"
    evil_py = (f"open({str(marker)!r}, 'w').write('ran')\n"
               "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n")
    files = {"file:1/model.py": evil_py.encode()}
    config = json.dumps({"backend": "python", "max_batch_size": 0,
                         "input": [{"name": "I", "data_type": "TYPE_FP32", "dims": [1]}],
                         "output": [{"name": "O", "data_type": "TYPE_FP32", "dims": [1]}]})
    http_attempts = {
        "evil/load": {"parameters": {"config": config, "file:1/model.py":
                                     base64.b64encode(evil_py.encode()).decode()}},
        "identity/load": {"parameters": {"config": config, "file:1/model.py":
                                         base64.b64encode(evil_py.encode()).decode()}},
        "identity/unload": {},
    }
    # Without the admin key the repository API is closed; with it, load and unload are off.
    for headers, code, says in ((None, 403, "restricted"),
                                (locked_server.admin_headers("http"), 503, "not allowed")):
        for path, body in http_attempts.items():
            request = urllib.request.Request(
                f"http://{locked_server.http_url}/v2/repository/models/{path}", method="POST",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json", **(headers or {})})
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=10)
            assert refused.value.code == code, path
            assert says in json.loads(refused.value.read())["error"]

    client = grpcclient.InferenceServerClient(locked_server.grpc_url)
    try:
        for headers, says in ((None, "restricted"),
                              (locked_server.admin_headers(), "not allowed")):
            for call, args in ((client.load_model, ("evil",)),
                               (client.load_model, ("identity",)),
                               (client.unload_model, ("identity",))):
                extra = {"config": config, "files": files} if call == client.load_model else {}
                with pytest.raises(grpcclient.InferenceServerException, match=says):
                    call(*args, headers=headers, **extra)
        assert client.is_model_ready("identity")
        index = client.get_model_repository_index(
            headers=locked_server.admin_headers(), as_json=True)["models"]
    finally:
        client.close()
    assert [entry["name"] for entry in index] == ["identity"]  # the staging copy is not served
    assert not marker.exists()
    infer_identity(locked_server.grpc_url)


def _python_backend_region(server: TritonServer) -> str:
    """The key of one of the python backend's own shared-memory regions (as a client would find
    it in /dev/shm)."""
    assert server.shm_prefix is not None
    regions = shm_files(server.shm_prefix)
    assert regions, "the python backend made no region"
    return "/" + regions[0]


@pytest.mark.integration
def test_no_client_can_register_shared_memory_and_the_server_keeps_serving(
    locked_server: TritonServer,
) -> None:
    """A client that registered the python backend's own region and asked for an output there
    aborted tritonserver (boost::interprocess::lock_exception); registration is now refused on
    both protocols, without the admin key or with a wrong one, and the server stays up."""
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    key = _python_backend_region(locked_server)
    grpc = grpcclient.InferenceServerClient(locked_server.grpc_url)
    http = httpclient.InferenceServerClient(locked_server.http_url)
    try:
        for client, protocol in ((grpc, "grpc"), (http, "http")):
            for headers in (None, admin_headers("guess", protocol)):
                with pytest.raises(Exception, match="restricted") as refused:
                    client.register_system_shared_memory("r0", key, 64, headers=headers)
                assert "InferenceServerException" in type(refused.value).__name__
                with pytest.raises(Exception, match="restricted"):
                    client.get_system_shared_memory_status(headers=headers)
                with pytest.raises(Exception, match="restricted"):
                    client.unregister_system_shared_memory(headers=headers)
        # The attack's second half: an output written into the (unregistered) region.
        x = np.arange(4, dtype=np.float32).reshape(1, 4)
        inp = grpcclient.InferInput("INPUT0", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        out = grpcclient.InferRequestedOutput("OUTPUT0")
        out.set_shared_memory("r0", 16)
        with pytest.raises(grpcclient.InferenceServerException):
            grpc.infer("identity", [inp], outputs=[out])
    finally:
        grpc.close()
        http.close()
    assert locked_server._proc is not None and locked_server._proc.poll() is None
    infer_identity(locked_server.grpc_url)


@pytest.mark.integration
def test_trace_and_log_settings_are_closed_to_clients(locked_server: TritonServer) -> None:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(locked_server.grpc_url)
    try:
        for call in (lambda: client.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"]}),
                     lambda: client.update_log_settings(settings={"log_verbose_level": 1}),
                     lambda: client.get_log_settings()):
            with pytest.raises(grpcclient.InferenceServerException, match="restricted"):
                call()
        # What clients need stays open: health, metadata, config, statistics, inference.
        assert client.is_server_ready() and client.is_model_ready("identity")
        assert client.get_model_metadata("identity", as_json=True)["name"] == "identity"
        assert client.get_model_config("identity", as_json=True)["config"]["name"] == "identity"
        assert client.get_inference_statistics("identity", as_json=True)["model_stats"]
    finally:
        client.close()


def test_extra_args_cannot_reopen_the_restricted_apis(repo_with_staging: Path) -> None:
    for flag in ("--grpc-restricted-protocol=inference:k=v", "--http-restricted-api=health:k=v"):
        with pytest.raises(ServerError, match="restricted"):
            TritonServer(repo_with_staging, extra_args=[flag])


@pytest.mark.integration
def test_the_server_reads_a_view_holding_only_links_to_the_served_models(
    locked_server: TritonServer,
) -> None:
    view = locked_server.repository_view
    assert view is not None and view != locked_server.repo
    assert [p.name for p in view.iterdir()] == ["identity"] and (view / "identity").is_symlink()
    argv = Path(f"/proc/{locked_server.pid}/cmdline").read_bytes().split(b"\0")
    assert f"--model-repository={view}".encode() in argv
    assert b"--model-control-mode=none" in argv
    restricted = [arg for arg in argv if b"restricted" in arg]
    assert len(restricted) == 2 and all(
        b"shared-memory,model-repository,trace,logging:attndeploy-admin-key=" in arg
        for arg in restricted)


@pytest.mark.integration
def test_stop_after_the_server_was_killed_ends_its_stubs_and_frees_its_memory(
    tmp_path: Path,
) -> None:
    write_python_model(tmp_path / "repo", "identity", IDENTITY_MODEL)
    ports = [str(port) for port in free_ports()]
    started = parse_json(run_cli(
        "serve", "--repo", "repo", "--background", "--grpc-port", ports[0], "--http-port",
        ports[1], "--metrics-port", ports[2], "--json", cwd=tmp_path))
    pid, prefix, view = started["pid"], started["shm_prefix"], Path(started["repository_view"])
    state_path = tmp_path / "repo" / ".attndeploy-server.json"
    try:
        assert started["format"] == STATE_FORMAT
        assert stat.S_IMODE(state_path.stat().st_mode) == 0o600
        assert len(group_members(pid)) >= 2 and shm_files(prefix)  # server + a python stub
        os.kill(pid, signal.SIGKILL)
        assert wait_for(lambda: pid not in group_members(pid), 10)
        result = run_cli("stop", "--repo", "repo", cwd=tmp_path)
        assert_one_line_error(result, "server", "no longer running", "stale record")
        assert group_members(pid) == []
        assert shm_files(prefix) == []
        assert not view.exists() and not state_path.exists()
    finally:
        for member in group_members(pid):
            os.kill(member, signal.SIGKILL)


@pytest.mark.integration
def test_a_killed_foreground_serve_takes_its_server_and_stubs_with_it(tmp_path: Path) -> None:
    write_python_model(tmp_path / "repo", "identity", IDENTITY_MODEL)
    ports = [str(port) for port in free_ports()]
    cli = subprocess.Popen(
        [sys.executable, "-m", "attndeploy", "serve", "--repo", "repo", "--grpc-port", ports[0],
         "--http-port", ports[1], "--metrics-port", ports[2], "--json"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    server_pid = None
    try:
        lines = []
        while not lines or lines[-1] != "}":  # the record is printed once the server is ready
            line = cli.stdout.readline()
            assert line, f"serve ended early: {cli.stderr.read()}"
            lines.append(line.rstrip("\n"))
        server_pid = json.loads("\n".join(lines))["pid"]
        assert len(group_members(server_pid)) >= 2  # server + a python stub
        infer_identity(f"127.0.0.1:{ports[0]}")
        cli.kill()
        cli.wait(timeout=10)
        assert wait_for(lambda: group_members(server_pid) == [], 30)
    finally:
        if cli.poll() is None:
            cli.kill()
        if server_pid is not None:
            for member in group_members(server_pid):
                os.kill(member, signal.SIGKILL)
