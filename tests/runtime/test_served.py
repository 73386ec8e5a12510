"""In-process `predict` against the real tritonserver, docs/serving.md's three ways side by side:
`attndeploy infer --text` over gRPC and a KServe v2 JSON request over HTTP (what the page's
curl sends) give the labels, tags and open gates that `InferenceModel.predict` gives.

The served TEXT model does not exist yet, so the server runs the id model (python flavour) and
the text is tokenized by `infer --text`'s path (for gRPC) or by the runtime tokenizer (for HTTP).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from attndeploy.runtime import InferenceModel
from attndeploy.serving.client.infer import infer_request
from attndeploy.serving.packaging.repository import PackageOptions, package_model
from attndeploy.serving.server import TritonServer, free_ports

from .conftest import TEXTS, TextExports
from .records import assert_same_record

pytestmark = pytest.mark.integration

MODELS = {"ganet": "ganet_mlp", "tagger": "ganet_tagging", "standard": "standard"}


@pytest.fixture(scope="module")
def served(text_exports: TextExports, tmp_path_factory) -> Iterator[tuple[TritonServer, Path]]:
    repo = tmp_path_factory.mktemp("runtime_served") / "repo"
    for name, case_id in MODELS.items():
        package_model(text_exports.get(case_id).path, repo, PackageOptions(name=name))
    grpc, http, metrics = free_ports()
    server = TritonServer(repo, grpc_port=grpc, http_port=http, metrics_port=metrics,
                          log_file=repo.parent / "server.log")
    with server:
        yield server, repo


def kserve_v2(http_url: str, model: str, ids: list[int]) -> dict[str, np.ndarray]:
    """POST /v2/models/<model>/infer with a JSON body, as docs/serving.md's curl does."""
    body = {"inputs": [
        {"name": name, "shape": [1, len(ids)], "datatype": "INT64", "data": data}
        for name, data in (("input_ids", ids), ("attention_mask", [1] * len(ids)))
    ]}
    request = urllib.request.Request(f"http://{http_url}/v2/models/{model}/infer",
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        answer = json.load(response)
    return {o["name"]: np.asarray(o["data"]).reshape(o["shape"]) for o in answer["outputs"]}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_grpc_and_http_answers_carry_predict_s_labels(served, text_exports, name):
    server, repo = served
    model = InferenceModel(text_exports.get(MODELS[name]).path, threads=1)
    predictions = model.predict(TEXTS, batch_size=8)
    for text, prediction in zip(TEXTS, predictions, strict=True):
        result = infer_request(url=server.grpc_url, model=name, text=text, repo=repo)
        over_http = kserve_v2(server.http_url, name, model.tokenizer.encode(text))
        assert_same_record(result, prediction.to_dict(), atol=1e-6)
        np.testing.assert_allclose(over_http["logits"][0], prediction.logits, rtol=0, atol=1e-6)
        if prediction.tags is None:
            assert model.labels[int(over_http["logits"][0].argmax())] == prediction.label
        if prediction.attended is not None:
            np.testing.assert_array_equal(over_http["gates"][0].astype(bool), prediction.gates)
