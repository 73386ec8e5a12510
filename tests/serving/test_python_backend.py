"""The python flavour under the real tritonserver (nvidia-pytriton wheel): packaged fixture models
answer exactly as in-process onnxruntime, alone and batched, and bad requests fail alone.

One server serves the whole module (a start costs a few seconds); each test reads the statistics
before and after its own requests, so test order does not matter.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from attndeploy.serving.packaging.repository import PackageOptions, package_model
from attndeploy.serving.server import TritonServer, free_ports

from .onnx_fixtures import build_model, random_request, save_model

pytestmark = pytest.mark.integration

FIXTURES = {"cls": {"custom_op": True}, "gated": {"gated": True}, "tag": {"head": "tagging"}}
MAX_SEQ = 32
VOCAB = 16


@dataclass
class Served:
    server: TritonServer
    client: Any  # tritonclient.grpc.InferenceServerClient
    repo: Path
    stats_at_start: dict[str, tuple[int, int]]
    sessions: dict[str, ort.InferenceSession]


def counts(client: Any, model: str) -> tuple[int, int]:
    """(inference_count, execution_count) of `model`; inference_count counts batch rows."""
    stats = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
    return int(stats.get("inference_count", 0)), int(stats.get("execution_count", 0))


def counts_once_settled(client: Any, model: str, inferences: int,
                        timeout_s: float = 10.0) -> tuple[int, int]:
    """`counts` once inference_count has reached `inferences`, or as it stands after `timeout_s`.

    The server records an execution's statistics after its responses have left, so a client
    can hold every answer a moment before the counts include them.
    """
    deadline = time.monotonic() + timeout_s
    current = counts(client, model)
    while current[0] < inferences and time.monotonic() < deadline:
        time.sleep(0.05)
        current = counts(client, model)
    return current


def start_server(repo: Path, log_file: Path) -> TritonServer:
    grpc, http, metrics = free_ports()
    server = TritonServer(repo, grpc_port=grpc, http_port=http, metrics_port=metrics,
                          log_file=log_file)
    server.__enter__()
    return server


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    import tritonclient.grpc as grpcclient

    root = tmp_path_factory.mktemp("python_backend")
    repo = root / "repo"
    for name, kwargs in FIXTURES.items():
        source = save_model(build_model(**kwargs), root / "src" / f"{name}.onnx")  # type: ignore[arg-type]
        package_model(source, repo, PackageOptions(name=name, max_batch_size=8))
    server = start_server(repo, root / "server.log")
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        sessions = {
            name: ort.InferenceSession(str(repo / name / "1" / "model.onnx"),
                                       providers=["CPUExecutionProvider"])
            for name in FIXTURES
        }
        yield Served(server, client, repo, {n: counts(client, n) for n in FIXTURES}, sessions)
    finally:
        client.close()
        server.stop()


def inputs(ids: np.ndarray, mask: np.ndarray, dtype: str = "INT64") -> list[Any]:
    import tritonclient.grpc as grpcclient

    out = []
    for name, array in (("input_ids", ids), ("attention_mask", mask)):
        entry = grpcclient.InferInput(name, list(array.shape), dtype)
        entry.set_data_from_numpy(array)
        out.append(entry)
    return out


def infer_concurrently(
    client: Any, model: str, requests: list[tuple[np.ndarray, np.ndarray]]
) -> list[tuple[Any, Any]]:
    """Send every request with `async_infer` at once; return (result, error) per request."""
    results: list[tuple[Any, Any]] = [(None, None)] * len(requests)
    done = threading.Semaphore(0)
    for index, (ids, mask) in enumerate(requests):
        def callback(result: Any, error: Any, index: int = index) -> None:  # keyword names matter
            results[index] = (result, error)
            done.release()

        client.async_infer(model, inputs(ids, mask), callback)
    for _ in requests:
        assert done.acquire(timeout=60), "a request never completed"
    return results


def assert_same_as_alone(served: Served, model: str, ids: np.ndarray, mask: np.ndarray,
                         result: Any) -> None:
    session = served.sessions[model]
    names = [o.name for o in session.get_outputs()]
    expected = session.run(names, {"input_ids": ids, "attention_mask": mask})
    for name, want in zip(names, expected, strict=True):
        got = result.as_numpy(name)
        assert got.dtype == want.dtype and got.shape == want.shape, name
        assert got.tobytes() == want.tobytes(), f"{model}.{name} differs for {ids.shape}"


# --------------------------------------------------------------------------- tests


def test_the_warmup_request_ran_and_is_counted_in_the_statistics(served: Served) -> None:
    assert served.stats_at_start == {name: (1, 1) for name in FIXTURES}


@pytest.mark.parametrize("model", sorted(FIXTURES))
def test_responses_equal_in_process_onnxruntime_bit_for_bit(served: Served, model: str) -> None:
    rng = np.random.default_rng(11)
    for batch, seq in [(1, 1), (1, 8), (3, 5), (8, MAX_SEQ), (2, 17)]:
        ids, mask = random_request(rng, batch, seq, VOCAB)
        result = served.client.infer(model, inputs(ids, mask))
        assert_same_as_alone(served, model, ids, mask, result)


def test_concurrent_same_shape_requests_are_batched(served: Served) -> None:
    rng = np.random.default_rng(5)
    requests = [random_request(rng, 1, 8, VOCAB) for _ in range(32)]
    inferences, executions = counts(served.client, "cls")
    results = infer_concurrently(served.client, "cls", requests)
    inferences_after, executions_after = counts_once_settled(served.client, "cls",
                                                             inferences + 32)
    for (ids, mask), (result, error) in zip(requests, results, strict=True):
        assert error is None, error
        assert_same_as_alone(served, "cls", ids, mask, result)
    assert inferences_after - inferences == 32
    assert executions_after - executions < 32


@pytest.mark.parametrize("model", ["gated", "tag"])
def test_concurrent_requests_of_different_lengths_equal_each_alone(
    served: Served, model: str
) -> None:
    rng = np.random.default_rng(17)
    requests = [
        random_request(rng, int(rng.integers(1, 3)), int(rng.integers(1, MAX_SEQ + 1)), VOCAB)
        for _ in range(24)
    ]
    rows = sum(ids.shape[0] for ids, _ in requests)
    inferences, executions = counts(served.client, model)
    results = infer_concurrently(served.client, model, requests)
    inferences_after, executions_after = counts_once_settled(served.client, model,
                                                             inferences + rows)
    for (ids, mask), (result, error) in zip(requests, results, strict=True):
        assert error is None, error
        assert_same_as_alone(served, model, ids, mask, result)
    assert inferences_after - inferences == rows
    assert executions_after - executions < len(requests)  # mixed lengths shared executions


BAD_REQUESTS = {
    "wrong dtype": (np.zeros((1, 4), np.int32), np.ones((1, 4), np.int32), "INT32"),
    "wrong rank": (np.zeros((1, 1, 4), np.int64), np.ones((1, 1, 4), np.int64), "INT64"),
    "seq above max": (np.zeros((1, MAX_SEQ + 1), np.int64), np.ones((1, MAX_SEQ + 1), np.int64),
                      "INT64"),
    "mismatched shapes": (np.zeros((1, 4), np.int64), np.ones((1, 5), np.int64), "INT64"),
    "all-zero mask": (np.zeros((1, 4), np.int64), np.zeros((1, 4), np.int64), "INT64"),
    "id out of range": (np.full((1, 4), VOCAB, np.int64), np.ones((1, 4), np.int64), "INT64"),
}


@pytest.mark.parametrize("case", sorted(BAD_REQUESTS))
def test_bad_requests_are_invalid_arguments_and_the_server_stays_ready(
    served: Served, case: str
) -> None:
    from tritonclient.utils import InferenceServerException

    ids, mask, dtype = BAD_REQUESTS[case]
    with pytest.raises(InferenceServerException) as info:
        served.client.infer("gated", inputs(ids, mask, dtype))
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT", info.value.message()
    assert served.client.is_server_ready() and served.client.is_model_ready("gated")
    good_ids, good_mask = random_request(np.random.default_rng(2), 2, 6, VOCAB)
    result = served.client.infer("gated", inputs(good_ids, good_mask))
    assert_same_as_alone(served, "gated", good_ids, good_mask, result)


def test_a_bad_request_sent_among_good_ones_fails_alone(served: Served) -> None:
    rng = np.random.default_rng(23)
    requests = [random_request(rng, 1, int(rng.integers(2, 12)), VOCAB) for _ in range(12)]
    bad = {3, 7}
    for index in bad:
        requests[index] = (requests[index][0], np.zeros_like(requests[index][1]))
    results = infer_concurrently(served.client, "tag", requests)
    for index, ((ids, mask), (result, error)) in enumerate(zip(requests, results, strict=True)):
        if index in bad:
            assert error is not None and error.status() == "StatusCode.INVALID_ARGUMENT"
            assert "no real token" in error.message()
        else:
            assert error is None, error
            assert_same_as_alone(served, "tag", ids, mask, result)


def test_classifier_logits_carry_label_names_with_class_count(served: Served) -> None:
    import tritonclient.grpc as grpcclient

    ids, mask = random_request(np.random.default_rng(4), 2, 6, VOCAB)
    result = served.client.infer(
        "cls", inputs(ids, mask), outputs=[grpcclient.InferRequestedOutput("logits", class_count=2)]
    )
    top = result.as_numpy("logits")
    assert top.shape == (2, 2)
    expected = served.sessions["cls"].run(["logits"], {"input_ids": ids, "attention_mask": mask})[0]
    for row, entries in enumerate(top):
        indices = [int(entry.decode().split(":")[1]) for entry in entries]
        assert indices == list(np.argsort(-expected[row], kind="stable")[:2])
        assert all(entry.decode().split(":")[2] == f"label_{i}"
                   for entry, i in zip(entries, indices, strict=True))


# --------------------------------------------------------------------------- a real export


@pytest.mark.slow
@pytest.mark.parametrize("case_id", ["standard", "qvi_pooled", "ganet_mlp", "evolving"])
def test_an_exported_checkpoint_of_every_variant_serves_like_onnxruntime(
    tmp_path: Path, case_id: str
) -> None:
    """Checkpoint -> export -> package -> serve, with the real exporter (~15 s per variant):
    a request alone is bit-identical to in-process onnxruntime on the same model.onnx; requests
    batched by the server agree within the validation tolerance (gates exactly)."""
    import tritonclient.grpc as grpcclient

    from attndeploy.checkpoint import save_checkpoint
    from attndeploy.export.exporter import export_checkpoint
    from attndeploy.models import build_model as build_torch_model
    from attndeploy.serving.packaging.check_repo import check_repository
    from tests.cases import CASES_BY_ID

    config = CASES_BY_ID[case_id].config(max_seq=24)
    checkpoint = save_checkpoint(build_torch_model(config), tmp_path / config.variant,
                                 label_names=["neg", "neu", "pos"])
    (model,) = package_model(checkpoint, tmp_path / "repo", exporter=export_checkpoint)
    assert model.name == config.variant and model.gated == (config.variant == "ganet")
    assert check_repository(tmp_path / "repo")
    session = ort.InferenceSession(str(model.path / "1" / "model.onnx"),
                                   providers=["CPUExecutionProvider"])
    outputs = [o.name for o in session.get_outputs()]
    server = start_server(tmp_path / "repo", tmp_path / "server.log")
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        rng = np.random.default_rng(0)
        requests = [random_request(rng, int(rng.integers(1, 3)), int(rng.integers(1, 25)), 50)
                    for _ in range(16)]
        ids, mask = requests[0]
        (alone, error), = infer_concurrently(client, model.name, [requests[0]])
        assert error is None, error
        expected = session.run(outputs, {"input_ids": ids, "attention_mask": mask})
        for name, want in zip(outputs, expected, strict=True):
            np.testing.assert_array_equal(alone.as_numpy(name), want)
        results = infer_concurrently(client, model.name, requests)
        for (ids, mask), (result, error) in zip(requests, results, strict=True):
            assert error is None, error
            expected = dict(zip(outputs, session.run(
                outputs, {"input_ids": ids, "attention_mask": mask}), strict=True))
            if "gates" in expected:
                np.testing.assert_array_equal(result.as_numpy("gates"), expected["gates"])
            np.testing.assert_allclose(result.as_numpy("logits"), expected["logits"],
                                       rtol=1e-4, atol=1e-5)
    finally:
        client.close()
        server.stop()
