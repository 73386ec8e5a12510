"""Converted HF checkpoints (EA-BERT and GA-Net BERT) packaged (python flavour) and served by
the real tritonserver: a padded batch answers as the checkpoint's PyTorch model does (logits
within fp32 tolerance, gates exactly) and as in-process onnxruntime does (byte for byte)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch

pytest.importorskip("transformers")

from attndeploy.checkpoint import read_checkpoint  # noqa: E402
from attndeploy.export.exporter import export_checkpoint  # noqa: E402
from attndeploy.serving.repository import PackageOptions, package_model  # noqa: E402
from attndeploy.serving.server import TritonServer, free_ports  # noqa: E402

from .hf_models import padded_batch, save_converted_checkpoint  # noqa: E402

pytestmark = pytest.mark.integration

MODELS = {"ea_bert": ("bert", "evolving"), "ga_distilbert": ("distilbert", "ganet")}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    import tritonclient.grpc as grpcclient

    root = tmp_path_factory.mktemp("hf_serving")
    repo = root / "repo"
    models = {}
    for name, (model_type, variant) in MODELS.items():
        checkpoint = save_converted_checkpoint(root / name, model_type, variant, layers=3)
        onnx_path = export_checkpoint(checkpoint, root / f"{name}.onnx").path
        package_model(onnx_path, repo, PackageOptions(name=name, text=False, max_batch_size=8))
        models[name] = (read_checkpoint(checkpoint).model,
                        ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"]))
    grpc, http, metrics = free_ports()
    server = TritonServer(repo, grpc_port=grpc, http_port=http, metrics_port=metrics,
                          log_file=root / "server.log")
    server.__enter__()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        yield {"client": client, "models": models}
    finally:
        client.close()
        server.stop()


def infer(client: Any, model: str, ids: np.ndarray, mask: np.ndarray, outputs: list[str]):
    import tritonclient.grpc as grpcclient

    inputs = []
    for name, array in (("input_ids", ids), ("attention_mask", mask)):
        entry = grpcclient.InferInput(name, list(array.shape), "INT64")
        entry.set_data_from_numpy(array)
        inputs.append(entry)
    result = client.infer(model, inputs)
    return {name: result.as_numpy(name) for name in outputs}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_served_model_answers_as_pytorch_and_onnxruntime(served: dict[str, Any], name: str):
    torch_model, session = served["models"][name]
    outputs = [o.name for o in session.get_outputs()]
    assert outputs == (["logits", "gates"] if MODELS[name][1] == "ganet" else ["logits"])
    ids, mask = (t.numpy() for t in padded_batch(4, 13, seed=3))
    got = infer(served["client"], name, ids, mask, outputs)
    local = dict(zip(outputs, session.run(outputs, {"input_ids": ids, "attention_mask": mask}),
                     strict=True))
    with torch.no_grad():
        reference = torch_model(torch.from_numpy(ids), torch.from_numpy(mask))
    for output in outputs:
        assert got[output].tobytes() == local[output].tobytes(), output
    np.testing.assert_allclose(got["logits"], reference["logits"].numpy(), atol=1e-5, rtol=1e-4)
    if "gates" in outputs:
        assert np.array_equal(got["gates"], reference["gates"].numpy())
        assert not (got["gates"] & (mask == 0)).any()


def test_the_served_model_is_ready_and_described_by_its_config(served: dict[str, Any]):
    client = served["client"]
    for name in MODELS:
        assert client.is_model_ready(name)
        config = client.get_model_config(name, as_json=True)["config"]
        assert {i["name"] for i in config["input"]} == {"input_ids", "attention_mask"}
        assert config["output"][0]["label_filename"] == "labels.txt"


def test_a_request_longer_than_max_seq_fails_alone(served: dict[str, Any]):
    from tritonclient.utils import InferenceServerException

    ids = np.full((1, 40), 5, dtype=np.int64)  # the checkpoints take 32 tokens
    with pytest.raises(InferenceServerException, match="32"):
        infer(served["client"], "ea_bert", ids, np.ones_like(ids), ["logits"])
    ok_ids, ok_mask = (t.numpy() for t in padded_batch(1, 5))
    assert infer(served["client"], "ea_bert", ok_ids, ok_mask, ["logits"])["logits"].shape == (
        1, 3)
