"""`TritonRunner` and `infer_once`: error translation without a server, then the real server."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from tritonclient.utils import InferenceServerException

from attndeploy.errors import ServerError
from attndeploy.serving.client.triton import (
    TritonRunner,
    error_status,
    infer_once,
    server_error,
    to_triton_datatype,
)
from attndeploy.serving.server import TritonServer, free_port, free_ports

from .loadtest_fixtures import TINY_LABELS, TINY_MODEL, TINY_VOCAB, tiny_onnx_path
from .loadtest_fixtures import write_tiny_repository as _write_repo

URL = "127.0.0.1:8001"


def _error(status: str, message: str = "boom") -> InferenceServerException:
    return InferenceServerException(msg=message, status=status)


# --------------------------------------------------------------------------- no server needed


def test_connection_refused_reads_as_no_server_with_the_command_to_start_one() -> None:
    error = server_error(_error("StatusCode.UNAVAILABLE", "Connection refused"), URL, "m",
                         "the liveness probe", 5.0)
    assert "No Triton server answers at 127.0.0.1:8001" in str(error)
    assert "attndeploy serve" in str(error)


def test_a_deadline_reads_as_no_answer_within_the_timeout() -> None:
    error = server_error(_error("StatusCode.DEADLINE_EXCEEDED"), URL, "m", "the probe", 2.5)
    assert "did not answer the probe within 2.5 s" in str(error)


def test_an_unknown_model_is_named() -> None:
    error = server_error(_error("StatusCode.NOT_FOUND", "Request for unknown model: 'x'"),
                         URL, "x", "the inference request", 1.0)
    assert "no model 'x'" in str(error)


def test_other_errors_keep_the_status_and_the_server_message() -> None:
    error = server_error(_error("StatusCode.INTERNAL", "Gather index out of range"), URL, "m",
                         "the inference request", 1.0)
    assert "[StatusCode.INTERNAL]" in str(error) and "Gather index out of range" in str(error)
    assert str(error).startswith("The inference request")


def test_error_status_falls_back_to_the_class_name() -> None:
    assert error_status(_error("StatusCode.CANCELLED")) == "StatusCode.CANCELLED"
    assert error_status(RuntimeError("x")) == "RuntimeError"


def test_numpy_dtypes_map_to_triton_datatypes() -> None:
    assert to_triton_datatype(np.zeros(1, np.int64)) == "INT64"
    assert to_triton_datatype(np.zeros(1, np.float32)) == "FP32"
    assert to_triton_datatype(np.zeros(1, bool)) == "BOOL"


def test_a_non_positive_timeout_is_refused() -> None:
    with pytest.raises(ServerError, match="timeout_s"):
        TritonRunner(URL, "m", timeout_s=0)


def test_an_inactive_runner_says_to_use_a_with_block() -> None:
    runner = TritonRunner(URL, "m")
    with pytest.raises(ServerError, match="with"):
        runner.infer({"input_ids": np.zeros((1, 1), np.int64)})
    assert runner.is_ready() is False


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_no_server_is_a_server_error_within_seconds(protocol: str) -> None:
    url = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(ServerError, match="No Triton server answers"):
        infer_once(url, "tiny", np.full((1, 4), 3), np.ones((1, 4)), timeout_s=5.0,
                   protocol=protocol)
    assert time.monotonic() - started < 10.0


def test_an_http_server_that_never_answers_is_a_deadline() -> None:
    import socket

    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        url = f"127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        with pytest.raises(ServerError, match=r"did not answer the liveness probe within 1 s"):
            TritonRunner(url, "m", timeout_s=1.0, protocol="http").activate()
        assert time.monotonic() - started < 5.0


def test_the_protocol_picks_the_default_port_and_an_unknown_one_is_refused() -> None:
    assert TritonRunner(None, "m").url == "127.0.0.1:8001"
    assert TritonRunner(None, "m", protocol="http").url == "127.0.0.1:8000"
    with pytest.raises(ServerError, match="grpc or http"):
        TritonRunner(None, "m", protocol="websocket")


@pytest.fixture
def grpc_port() -> Iterator[int]:
    """A gRPC server (HTTP/2) with no service: the wrong port for an HTTP client."""
    from concurrent.futures import ThreadPoolExecutor

    import grpc

    server = grpc.server(ThreadPoolExecutor(1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield port
    server.stop(0)


@pytest.fixture
def http_port() -> Iterator[int]:
    """A plain HTTP/1 server answering 501 to everything: the wrong port for a gRPC client."""
    import http.server
    import threading

    class Quiet(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_http_to_a_grpc_port_says_it_does_not_speak_http(grpc_port: int) -> None:
    url = f"127.0.0.1:{grpc_port}"
    with pytest.raises(ServerError) as info:
        TritonRunner(url, "m", timeout_s=5.0, protocol="http").activate()
    assert str(info.value) == (
        f"The server at {url} does not speak HTTP (Expected HTTP/, RTSP/ or ICE/); is it the "
        "gRPC port? use --url 127.0.0.1:8000 or --protocol grpc")


def test_grpc_to_an_http_port_says_it_does_not_speak_grpc(http_port: int) -> None:
    url = f"127.0.0.1:{http_port}"
    with pytest.raises(ServerError) as info:
        TritonRunner(url, "m", timeout_s=5.0).activate()
    message = str(info.value)
    assert message.startswith(f"The server at {url} does not speak gRPC (")
    assert message.endswith("is it the HTTP port? use --url 127.0.0.1:8001 or --protocol http")


@pytest.mark.parametrize("words", ["Trying to connect an http1.x server",
                                   "Failed parsing HTTP/2 (Expected SETTINGS frame)"])
def test_grpc_s_words_for_an_http_answer_read_as_the_wrong_port(words: str) -> None:
    error = server_error(_error("StatusCode.UNAVAILABLE", f"last error: {words}"),
                         "host:8000", "m", "the liveness probe", 5.0)
    assert "does not speak gRPC" in str(error) and "--url host:8001" in str(error)


def test_an_http_server_that_hangs_up_without_answering_is_no_server() -> None:
    import socket
    import threading

    with socket.socket() as rude:  # accepts, then closes every connection at once
        rude.bind(("127.0.0.1", 0))
        rude.listen(8)

        def hang_up() -> None:
            while True:
                try:
                    connection, _ = rude.accept()
                except OSError:
                    return
                connection.close()

        threading.Thread(target=hang_up, daemon=True).start()
        url = f"127.0.0.1:{rude.getsockname()[1]}"
        with pytest.raises(ServerError, match=f"No Triton server answers at {url}"):
            TritonRunner(url, "m", timeout_s=2.0, protocol="http").activate()


# --------------------------------------------------------------------------- the real server


@pytest.fixture(scope="module")
def tiny_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    repo = _write_repo(tmp_path_factory.mktemp("client-repo"))
    grpc, http, metrics = free_ports(3)  # distinct: three free_port() calls can repeat one
    with TritonServer(repo, grpc_port=grpc, http_port=http, metrics_port=metrics) as server:
        yield server


def _feed(batch: int = 2, seq: int = 7, seed: int = 0) -> dict[str, np.ndarray]:
    ids = np.random.default_rng(seed).integers(2, TINY_VOCAB, (batch, seq))  # [batch, seq]
    return {"input_ids": ids, "attention_mask": np.ones_like(ids)}


def _url(server: TritonServer, protocol: str) -> str:
    return server.grpc_url if protocol == "grpc" else server.http_url


@pytest.mark.integration
@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_one_inference_equals_in_process_onnxruntime_bit_for_bit(
    tiny_server: TritonServer, protocol: str
) -> None:
    feed = _feed()
    with TritonRunner(_url(tiny_server, protocol), TINY_MODEL, timeout_s=10,
                      protocol=protocol) as runner:
        served = runner.infer(feed)
    session = ort.InferenceSession(
        str(tiny_onnx_path(tiny_server.repo)), providers=["CPUExecutionProvider"]
    )
    logits, gates = session.run(["logits", "gates"], feed)
    assert set(served) == {"logits", "gates"}
    assert served["logits"].dtype == np.float32 and served["logits"].shape == (2, TINY_LABELS)
    assert served["logits"].tobytes() == logits.tobytes()
    assert served["gates"].dtype == np.bool_ and np.array_equal(served["gates"], gates)


@pytest.mark.integration
@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_metadata_lists_the_model_level_interface(tiny_server: TritonServer, protocol: str
                                                  ) -> None:
    with TritonRunner(_url(tiny_server, protocol), TINY_MODEL, protocol=protocol) as runner:
        metadata = runner.metadata()
        config = runner.model_config()
        stats = runner.statistics()
        assert runner.is_ready()
    assert stats["model_stats"][0]["name"] == TINY_MODEL
    assert int(config["max_batch_size"]) == 8 and config["backend"] == "python"
    assert [(s.name, s.datatype) for s in metadata.inputs] == [
        ("input_ids", "INT64"), ("attention_mask", "INT64")
    ]
    assert [(s.name, s.datatype, s.shape) for s in metadata.outputs] == [
        ("logits", "FP32", (-1, TINY_LABELS)), ("gates", "BOOL", (-1, -1))
    ]


@pytest.mark.integration
def test_infer_once_returns_outputs_by_name(tiny_server: TritonServer) -> None:
    feed = _feed(batch=1, seq=5, seed=3)
    outputs = infer_once(tiny_server.grpc_url, TINY_MODEL, feed["input_ids"],
                         feed["attention_mask"], timeout_s=10)
    assert outputs["logits"].shape == (1, TINY_LABELS) and outputs["gates"].shape == (1, 5)


@pytest.mark.integration
@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_a_missing_model_is_a_server_error_listing_the_served_ones(
    tiny_server: TritonServer, protocol: str
) -> None:
    # `attndeploy serve` closes the repository index to clients: the ready models are listed
    with pytest.raises(ServerError, match=r"no model 'nope' ready \(models ready there: tiny\)"):
        TritonRunner(_url(tiny_server, protocol), "nope", protocol=protocol).activate()


@pytest.mark.integration
def test_triton_s_ports_swapped_say_which_port_speaks_what(tiny_server: TritonServer) -> None:
    with pytest.raises(ServerError, match=r"does not speak HTTP .*is it the gRPC port\?"):
        TritonRunner(tiny_server.grpc_url, TINY_MODEL, protocol="http").activate()
    with pytest.raises(ServerError, match=r"does not speak gRPC .*is it the HTTP port\?"):
        TritonRunner(tiny_server.http_url, TINY_MODEL, protocol="grpc").activate()


@pytest.mark.integration
@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_a_request_the_model_rejects_is_a_server_error_with_its_message(
    tiny_server: TritonServer, protocol: str
) -> None:
    feed = _feed()
    feed["input_ids"] = feed["input_ids"] + 1000  # beyond the vocabulary
    with TritonRunner(_url(tiny_server, protocol), TINY_MODEL, protocol=protocol) as runner:
        with pytest.raises(ServerError, match="indices element out of data bounds"):
            runner.infer(feed)


def test_fixture_repository_has_the_three_files(tmp_path: Path) -> None:
    repo = _write_repo(tmp_path)
    model_dir = repo / TINY_MODEL
    assert (model_dir / "config.pbtxt").is_file() and (model_dir / "1" / "model.py").is_file()
    session = ort.InferenceSession(str(tiny_onnx_path(repo)), providers=["CPUExecutionProvider"])
    logits, gates = session.run(None, _feed(batch=3, seq=4))
    assert logits.shape == (3, TINY_LABELS) and gates.shape == (3, 4)
