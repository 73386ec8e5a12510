"""Text models under the real tritonserver, for every variant: raw text over gRPC and over HTTP
(KServe v2 JSON, as curl sends it) gives the prediction contract's wire form of in-process
`predict`'s predictions: logits within 1e-5, tokens, labels and GA-Net's attended tokens; a batch
of texts of different lengths in one request and across concurrent requests; a bad text is an
error for its request alone; `infer` and `loadtest` drive the text model over both protocols.

Models: tiny checkpoints with the built-in task's vocabulary, exported (tests/runtime/conftest.py
`TextExports`, about 3 s a case), packaged with `package_model` defaults (python flavour and
`<case>_text`, which runs the id model's ONNX itself), and for `BLS_CASES` again with
`text_bls` (`<case>_bls_text` calls `<case>_bls` by BLS), one server for the module.
`ganet_bilstm_aux` is the GA-Net that `train --data` trains: gates from a BiLSTM, ONNX `LSTM`
nodes in the served graph.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attndeploy.runtime import DEFAULT_MAX_TEXT_BYTES, InferenceModel
from attndeploy.runtime.contract import decode_wire, wire_outputs
from attndeploy.runtime.text import encode_text
from attndeploy.runtime.tokenizer import pad_sequences
from attndeploy.serving.client.infer import infer_request
from attndeploy.serving.loadtest import LoadTestConfig, run_load_test
from attndeploy.serving.packaging.repository import PackageOptions, package_model
from attndeploy.serving.server import TritonServer, free_ports
from tests.runtime.conftest import MAX_SEQ, TEXTS, TextExports
from tests.runtime.records import assert_same_record, contract_fields

pytestmark = pytest.mark.integration

CASES = ("standard", "qvi_pooled", "ganet_mlp", "ganet_bilstm_aux", "evolving", "ganet_tagging")
BLS_CASES = ("standard", "ganet_tagging")  # also packaged with --text-bls as `<case>_bls_text`
ATOL = 1e-5
BATCH = 8  # the packaged max_batch_size: texts per request at most


class Served:
    def __init__(self, server: TritonServer, repo: Path, exports: TextExports) -> None:
        self.server, self.repo, self.exports = server, repo, exports
        self.models = {case: InferenceModel(exports.get(case).path, threads=1) for case in CASES}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("text_served")
    exports = TextExports(root / "exports")
    for case in CASES:
        written = package_model(exports.get(case).path, root / "repo", PackageOptions(name=case))
        assert [m.name for m in written] == [case, f"{case}_text"]
    for case in BLS_CASES:  # the same models, their text models calling the id model by BLS
        package_model(exports.get(case).path, root / "repo",
                      PackageOptions(name=f"{case}_bls", text_bls=True))
    grpc, http, metrics = free_ports()
    with TritonServer(root / "repo", grpc_port=grpc, http_port=http, metrics_port=metrics,
                      log_file=root / "server.log") as server:
        yield Served(server, root / "repo", exports)


def expected(served: Served, case: str, texts: list[str]) -> dict[str, Any]:
    """In-process onnxruntime on the runtime's tokenization of `texts`, padded as one batch."""
    model = served.models[case]
    encoded = [encode_text(model.tokenizer, t, max_seq=MAX_SEQ) for t in texts]
    ids, mask = pad_sequences([e.ids for e in encoded])
    outputs = model.run(ids, mask)
    predictions = model.predict(texts)
    return {"logits": outputs["logits"], "mask": mask, "predictions": predictions}


def grpc_text(served: Served, model: str, texts: list[str | bytes]) -> dict[str, np.ndarray]:
    import tritonclient.grpc as grpcclient

    array = np.array([[t.encode() if isinstance(t, str) else t] for t in texts], dtype=object)
    entry = grpcclient.InferInput("text", list(array.shape), "BYTES")
    entry.set_data_from_numpy(array)
    client = grpcclient.InferenceServerClient(served.server.grpc_url)
    try:
        result = client.infer(model, [entry])
        return {o.name: result.as_numpy(o.name) for o in result.get_response().outputs}
    finally:
        client.close()


def kserve_json(served: Served, model: str, inputs: list[dict[str, Any]]) -> dict[str, Any]:
    """POST /v2/models/<model>/infer with a KServe v2 JSON body; the parsed JSON answer."""
    request = urllib.request.Request(
        f"http://{served.server.http_url}/v2/models/{model}/infer",
        data=json.dumps({"inputs": inputs}).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def http_text(served: Served, model: str, texts: list[str]) -> dict[str, np.ndarray]:
    answer = kserve_json(served, model, [
        {"name": "text", "shape": [len(texts), 1], "datatype": "BYTES", "data": texts}])
    return {o["name"]: np.array(o["data"], dtype=object if o["datatype"] == "BYTES"
                                else np.float32).reshape(o["shape"]) for o in answer["outputs"]}


def as_strings(array: np.ndarray) -> list:
    return [[v.decode() if isinstance(v, bytes) else v for v in row] for row in array.tolist()]


def assert_answers(served: Served, case: str, texts: list[str], out: dict[str, np.ndarray]
                   ) -> None:
    """The answer is the contract's wire form of `predict`'s predictions: the outputs its kind
    has, padded to the request's longest text, each row decoding to `predict`'s record."""
    want = expected(served, case, texts)
    predictions = want["predictions"]
    tagging, gated = case == "ganet_tagging", case.startswith("ganet")
    assert set(out) == set(wire_outputs(tagging=tagging, gated=gated))
    assert out["logits"].shape == want["logits"].shape
    mask = want["mask"].astype(bool)  # [B, T]
    logits = np.where(mask[..., None], want["logits"], 0) if tagging else want["logits"]
    np.testing.assert_allclose(out["logits"], logits, rtol=0, atol=ATOL)
    for row, p in enumerate(predictions):
        assert as_strings(out["tokens"])[row] == p.tokens + [""] * (mask.shape[1] - len(p.tokens))
        assert_same_record(decode_wire(out, p.label_names, row=row), p.to_dict(), atol=ATOL)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize("case", CASES)
def test_raw_text_gets_the_predictions_of_in_process_onnxruntime(served: Served, case: str,
                                                            protocol: str) -> None:
    send = grpc_text if protocol == "grpc" else http_text
    for start in range(0, len(TEXTS), BATCH):  # each request: texts of different lengths
        texts = TEXTS[start : start + BATCH]
        assert_answers(served, case, texts, send(served, f"{case}_text", texts))


@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize("case", BLS_CASES)
def test_a_text_model_calling_its_id_model_by_bls_answers_the_same(served: Served, case: str,
                                                                  protocol: str) -> None:
    send = grpc_text if protocol == "grpc" else http_text
    for start in range(0, len(TEXTS), BATCH):
        texts = TEXTS[start : start + BATCH]
        assert_answers(served, case, texts, send(served, f"{case}_bls_text", texts))


@pytest.mark.parametrize("case", ["standard", "ganet_mlp"])
def test_the_id_model_answers_kserve_v2_json_too(served: Served, case: str) -> None:
    model = served.models[case]
    ids = model.tokenizer.encode("w3 w17 alpha w8 amber w40")
    answer = kserve_json(served, case, [
        {"name": name, "shape": [1, len(ids)], "datatype": "INT64", "data": data}
        for name, data in (("input_ids", ids), ("attention_mask", [1] * len(ids)))])
    outputs = {o["name"]: np.array(o["data"]).reshape(o["shape"]) for o in answer["outputs"]}
    local = model.run(np.array([ids]), np.ones((1, len(ids)), np.int64))
    np.testing.assert_allclose(outputs["logits"], local["logits"], rtol=0, atol=ATOL)
    if "gates" in local:
        assert outputs["gates"].tolist() == local["gates"].tolist()


def test_concurrent_requests_of_different_lengths_are_each_answered_right(served: Served
                                                                          ) -> None:
    import tritonclient.grpc as grpcclient

    case = "ganet_mlp"
    requests = [TEXTS[i : i + 1 + i % 3] for i in range(0, len(TEXTS) - 3)]
    results: list[Any] = [None] * len(requests)
    done = threading.Semaphore(0)
    client = grpcclient.InferenceServerClient(served.server.grpc_url)
    try:
        for index, texts in enumerate(requests):
            array = np.array([[t.encode()] for t in texts], dtype=object)
            entry = grpcclient.InferInput("text", list(array.shape), "BYTES")
            entry.set_data_from_numpy(array)

            def callback(result: Any, error: Any, index: int = index) -> None:
                results[index] = (result, error)
                done.release()

            client.async_infer(f"{case}_text", [entry], callback)
        for _ in requests:
            assert done.acquire(timeout=60), "a request never completed"
    finally:
        client.close()
    for texts, (result, error) in zip(requests, results, strict=True):
        assert error is None, error
        out = {name: result.as_numpy(name)
               for name in wire_outputs(tagging=False, gated=True)}
        assert_answers(served, case, texts, out)
    stats = client_stats(served, f"{case}_text")
    assert stats["inference_count"] >= sum(len(t) for t in requests)


def client_stats(served: Served, model: str) -> dict[str, int]:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(served.server.grpc_url)
    try:
        entry = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
    finally:
        client.close()
    return {k: int(entry.get(k, 0)) for k in ("inference_count", "execution_count")}


BAD = {"empty": "", "whitespace": "  \t ", "too long": " ".join(["w3"] * (MAX_SEQ + 1)),
       "invalid utf-8": b"w3 \xff w4",
       "one huge word": "w" * (DEFAULT_MAX_TEXT_BYTES + 1)}  # one token: max_seq never fires


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_text_is_invalid_argument_for_its_request_alone(served: Served, case: str
                                                              ) -> None:
    import tritonclient.grpc as grpcclient

    model = "ganet_mlp_text"
    good = [TEXTS[0], TEXTS[5]]
    outcomes: dict[str, Any] = {}
    done = threading.Semaphore(0)
    client = grpcclient.InferenceServerClient(served.server.grpc_url)
    try:
        for name, text in (("good0", good[0]), ("bad", BAD[case]), ("good1", good[1])):
            raw = text.encode() if isinstance(text, str) else text
            entry = grpcclient.InferInput("text", [1, 1], "BYTES")
            entry.set_data_from_numpy(np.array([[raw]], dtype=object))

            def callback(result: Any, error: Any, name: str = name) -> None:
                outcomes[name] = (result, error)
                done.release()

            client.async_infer(model, [entry], callback)
        for _ in range(3):
            assert done.acquire(timeout=60)
    finally:
        client.close()
    _, error = outcomes["bad"]
    assert error is not None and error.status() == "StatusCode.INVALID_ARGUMENT"
    assert error.message().startswith("text 0 ")
    for name, text in (("good0", good[0]), ("good1", good[1])):
        result, error = outcomes[name]
        assert error is None
        out = {n: result.as_numpy(n) for n in wire_outputs(tagging=False, gated=True)}
        assert_answers(served, "ganet_mlp", [text], out)


def test_a_20_mb_text_is_refused_by_its_size_and_the_server_goes_on(served: Served) -> None:
    import tritonclient.grpc as grpcclient

    huge = b"w" * (20 * 2**20)  # over the 16 MiB request limit too
    with pytest.raises(grpcclient.InferenceServerException) as refused:
        grpc_text(served, "standard_text", [huge])
    assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "bytes, more than the limit of" in refused.value.message()
    assert_answers(served, "standard", [TEXTS[1]], grpc_text(served, "standard_text", [TEXTS[1]]))


def test_a_bad_text_over_http_is_400_with_the_reason_and_the_server_goes_on(served: Served
                                                                            ) -> None:
    with pytest.raises(urllib.error.HTTPError) as info:
        http_text(served, "standard_text", ["   "])
    assert info.value.code == 400
    assert json.load(info.value) == {
        "error": "text 0 has no tokens; every text needs at least one word"}
    assert_answers(served, "standard", [TEXTS[1]], http_text(served, "standard_text", [TEXTS[1]]))


@pytest.mark.parametrize("case", CASES)
def test_the_three_ways_to_run_a_model_answer_the_same_record(served: Served, case: str) -> None:
    """In process (`predict --json`), `infer` to the text model (label names from the server,
    no repository) and `infer` to the id model (tokenized and decoded here): the same contract
    fields with the same values."""
    text = TEXTS[3]
    (prediction,) = served.models[case].predict([text])
    in_process = prediction.to_dict()
    url = served.server.grpc_url
    through_text_model = infer_request(url=url, model=f"{case}_text", text=text, repo=None)
    through_id_model = infer_request(url=url, model=case, text=text, repo=served.repo)
    for answer in (through_text_model, through_id_model):
        assert set(contract_fields(answer)) == set(in_process)
        assert_same_record(answer, in_process, atol=ATOL)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_infer_sends_the_text_to_the_text_model(served: Served, protocol: str) -> None:
    url = served.server.grpc_url if protocol == "grpc" else served.server.http_url
    text = TEXTS[3]
    (prediction,) = served.models["ganet_mlp"].predict([text])
    result = infer_request(url=url, model="ganet_mlp_text", text=text, repo=served.repo,
                           protocol=protocol)
    assert result["model"] == "ganet_mlp_text" and result["text"] == text
    assert_same_record(result, prediction.to_dict(), atol=1e-5)
    tagged = infer_request(url=url, model="ganet_tagging_text", text=text, repo=None,
                           protocol=protocol)  # no repository: label names from the server
    (tags,) = served.models["ganet_tagging"].predict([text])
    assert_same_record(tagged, tags.to_dict(), atol=1e-5)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_loadtest_sends_a_text_file_to_the_text_and_the_id_model(served: Served, protocol: str,
                                                                 tmp_path: Path) -> None:
    lines = tmp_path / "lines.txt"
    lines.write_text("\n".join(TEXTS[:12]) + "\n\n")
    url = served.server.grpc_url if protocol == "grpc" else served.server.http_url
    onnx_path = served.exports.get("ganet_mlp").path
    for model in ("ganet_mlp_text", "ganet_mlp"):
        report = run_load_test(LoadTestConfig(
            model=model, url=url, protocol=protocol, concurrency=(4,), batch=2, text_file=lines,
            window_s=0.5, max_windows=2, stable_windows=2, warmup_requests=5,
            check_fraction=1.0, onnx_path=onnx_path), progress=False).to_dict()
        (level,) = report["levels"]
        assert report["passed"], report
        assert level["error_count"] == 0 and level["checks"]["done"] > 0
        assert level["checks"]["failed"] == 0
        assert any("12 non-blank lines" in w for w in report["warnings"])
