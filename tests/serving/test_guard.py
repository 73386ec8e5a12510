"""The request guard in front of the real tritonserver: each single request that ends the
bundled server (2.51) is answered with an error instead, over gRPC and HTTP (plain and gzip),
unary and streaming, and the server still answers after it; classification of a numeric output
still works through the guard; a symlink planted at a background server's log is replaced, not
followed.

The last tests send the same requests straight to the tritonserver behind the guard and check
that it still dies of them: they name each crash and the Triton release that fixes it
(docs/architecture.md, "Requests that end the server"), and fail once the bundled server no
longer needs the guard for it.

Integration: one background server for the module (a text model and its id model), and one
short-lived server for each crash.
"""

from __future__ import annotations

import gzip
import json
import queue
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attndeploy.serving.packaging.repository import PackageOptions, package_model
from attndeploy.serving.server import (
    TritonServer,
    default_state_path,
    free_ports,
    start_background,
    stop_background,
)
from attndeploy.serving.server.state import default_log_path
from tests.runtime.conftest import TextExports

pytestmark = pytest.mark.integration

NESTED_DEPTH = 35_000  # ends tritonserver 2.51 (20,000 levels do not)


def nested_json(depth: int) -> bytes:
    return ('{"inputs":[{"name":"text","shape":[1,1],"datatype":"BYTES","data":'
            + "[" * depth + '"w3"' + "]" * depth + "}]}").encode()


def classify_json(output: str) -> bytes:
    return json.dumps({
        "inputs": [{"name": "text", "shape": [1, 1], "datatype": "BYTES", "data": ["w3 alpha"]}],
        "outputs": [{"name": output, "parameters": {"classification": 2}}]}).encode()


class Endpoints:
    """Where to reach one server: gRPC and HTTP addresses (host:port)."""

    def __init__(self, grpc_url: str, http_url: str) -> None:
        self.grpc_url, self.http_url = grpc_url, http_url

    def post(self, path: str, body: bytes, headers: dict[str, str] | None = None
             ) -> tuple[int, dict[str, Any]]:
        request = urllib.request.Request(f"http://{self.http_url}{path}", data=body,
                                         headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status, json.load(answer)
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")

    def text_input(self, text: bytes = b"w3 alpha w17") -> Any:
        import tritonclient.grpc as grpcclient

        entry = grpcclient.InferInput("text", [1, 1], "BYTES")
        entry.set_data_from_numpy(np.array([[text]], dtype=object))
        return entry

    def classify_grpc(self, model: str, output: str) -> Any:
        import tritonclient.grpc as grpcclient

        client = grpcclient.InferenceServerClient(self.grpc_url)
        try:
            return client.infer(model, [self.text_input()], outputs=[
                grpcclient.InferRequestedOutput(output, class_count=2)], client_timeout=30)
        finally:
            client.close()

    def answers(self) -> bool:
        """The server is live and labels a text."""
        import tritonclient.grpc as grpcclient

        client = grpcclient.InferenceServerClient(self.grpc_url)
        try:
            result = client.infer("standard_text", [self.text_input()], client_timeout=10)
            return client.is_server_live() and result.as_numpy("label").shape == (1, 1)
        except grpcclient.InferenceServerException:
            return False
        finally:
            client.close()


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("guard")
    exports = TextExports(root / "exports")
    package_model(exports.get("standard").path, root / "repo", PackageOptions(name="standard"))
    return root / "repo"


@pytest.fixture(scope="module")
def planted(repo: Path) -> Path:
    """A file that a symlink at the background server's log points to."""
    target = repo.parent / "precious.txt"
    target.write_text("not a log\n")
    log = default_log_path(repo)
    log.symlink_to(target)
    return target


@pytest.fixture(scope="module")
def served(repo: Path, planted: Path) -> Iterator[Endpoints]:
    grpc, http, metrics = free_ports()
    state = start_background(repo, grpc_port=grpc, http_port=http, metrics_port=metrics)
    try:
        yield Endpoints(state["grpc_url"], state["http_url"])
    finally:
        stop_background(default_state_path(repo))


def test_a_symlink_at_the_servers_log_is_replaced_and_its_target_left_alone(
        served: Endpoints, repo: Path, planted: Path) -> None:
    log = default_log_path(repo)
    assert not log.is_symlink() and log.is_file()
    assert "Started GRPCInferenceService" in log.read_text()
    assert planted.read_text() == "not a log\n"


@pytest.mark.parametrize("output", ["label", "tokens"])
def test_grpc_classification_of_a_bytes_output_is_invalid_argument_and_the_server_goes_on(
        served: Endpoints, output: str) -> None:
    import tritonclient.grpc as grpcclient

    with pytest.raises(grpcclient.InferenceServerException) as raised:
        served.classify_grpc("standard_text", output)
    assert raised.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert f"output '{output}'" in raised.value.message() and "BYTES" in raised.value.message()
    assert served.answers()


def test_http_classification_of_a_bytes_output_is_400_and_the_server_goes_on(
        served: Endpoints) -> None:
    status, answer = served.post("/v2/models/standard_text/infer", classify_json("label"))
    assert status == 400 and "'BYTES'" in answer["error"]
    status, answer = served.post("/v2/models/standard_text/versions/1/infer",
                                 classify_json("tokens"))
    assert status == 400 and "output 'tokens'" in answer["error"]
    assert served.answers()


@pytest.mark.parametrize("encoding", [None, "gzip"])
def test_deeply_nested_json_is_400_and_the_server_goes_on(served: Endpoints,
                                                          encoding: str | None) -> None:
    body = nested_json(NESTED_DEPTH)
    headers = {}
    if encoding:  # tritonserver inflates a compressed body before it parses it
        body, headers = gzip.compress(body), {"Content-Encoding": encoding}
    status, answer = served.post("/v2/models/standard_text/infer", body, headers)
    assert status == 400 and f"{NESTED_DEPTH + 3} levels deep" in answer["error"]
    assert served.answers()


def test_http_passes_through_as_the_client_asked_for_it(served: Endpoints) -> None:
    """Headers are the client's own: no compression it did not ask for, gzip when it did;
    a chunked body is read whole and forwarded."""
    body = json.dumps({"inputs": [{"name": "text", "shape": [1, 1], "datatype": "BYTES",
                                   "data": ["w3 alpha"]}]}).encode()
    url = f"http://{served.http_url}/v2/models/standard_text/infer"
    with urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=30) as answer:
        assert answer.headers.get("Content-Encoding") is None
        assert json.load(answer)["model_name"] == "standard_text"
    request = urllib.request.Request(url, data=body, headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.headers.get("Content-Encoding") == "gzip"
        assert json.loads(gzip.decompress(answer.read()))["model_name"] == "standard_text"
    chunked = urllib.request.Request(url, data=iter([body[:10], body[10:]]),
                                     headers={"Transfer-Encoding": "chunked"})
    with urllib.request.urlopen(chunked, timeout=30) as answer:
        assert json.load(answer)["outputs"][0]["name"] == "tokens"


def test_classification_of_a_numeric_output_still_works_through_the_guard(
        served: Endpoints) -> None:
    result = served.classify_grpc("standard_text", "logits")
    classes = [entry.decode().split(":") for entry in result.as_numpy("logits")[0]]
    assert len(classes) == 2 and all(len(parts) == 2 for parts in classes)  # value:index
    assert float(classes[0][0]) >= float(classes[1][0])
    status, answer = served.post("/v2/models/standard_text/infer", classify_json("logits"))
    assert status == 200
    assert [o["name"] for o in answer["outputs"]] == ["logits"]


def test_a_refused_request_in_a_stream_is_answered_there_and_the_stream_goes_on(
        served: Endpoints) -> None:
    import tritonclient.grpc as grpcclient

    answers: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(served.grpc_url)
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        client.async_stream_infer("standard_text", [served.text_input()], request_id="bad",
                                  outputs=[grpcclient.InferRequestedOutput("label",
                                                                           class_count=2)])
        client.async_stream_infer("standard_text", [served.text_input()], request_id="good")
        first, second = answers.get(timeout=30), answers.get(timeout=30)
    finally:
        client.stop_stream()
        client.close()
    result, error = first
    assert result is None and "'BYTES'" in error.message()
    result, error = second
    assert error is None and result.get_response().id == "good"
    assert result.as_numpy("label").shape == (1, 1)
    assert served.answers()


# ------------------------------------------------------------------ the crashes behind the guard


@pytest.fixture
def unguarded(repo: Path, tmp_path: Path) -> Iterator[tuple[TritonServer, Endpoints]]:
    """A guarded server, and the endpoints of the tritonserver behind its guard."""
    grpc, http, metrics = free_ports()
    with TritonServer(repo, grpc_port=grpc, http_port=http, metrics_port=metrics,
                      log_file=tmp_path / "server.log") as server:
        inner = Endpoints(f"127.0.0.1:{server.upstream_grpc_port}",
                          f"127.0.0.1:{server.upstream_http_port}")
        assert inner.answers()
        yield server, inner


def ended(server: TritonServer, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server._proc is not None and server._proc.poll() is not None:
            return True
        time.sleep(0.1)
    return False


def test_tritonserver_2_51_itself_dies_of_classification_on_a_bytes_output(
        unguarded: tuple[TritonServer, Endpoints]) -> None:
    """Classification of a BYTES output ends tritonserver 2.51 (nvidia-pytriton 0.7.0, NGC
    24.10); no Triton release is known to fix it. When this fails, the bundled server answers it
    itself: update 'Serving safely'."""
    import tritonclient.grpc as grpcclient

    server, inner = unguarded
    with pytest.raises(grpcclient.InferenceServerException):
        inner.classify_grpc("standard_text", "label")
    assert ended(server)


def test_tritonserver_2_51_itself_dies_of_json_nested_35000_deep(
        unguarded: tuple[TritonServer, Endpoints]) -> None:
    """Deeply nested JSON ends tritonserver 2.51: Triton's JSON parser recursed until
    triton-inference-server/common#156 (April 2026) made it iterative. When this fails, the
    bundled server parses it itself: update 'Serving safely'."""
    server, inner = unguarded
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        inner.post("/v2/models/standard_text/infer", nested_json(NESTED_DEPTH))
    assert ended(server)
