"""A user's model that is not a text classifier, through the whole CLI as a person runs it:
`export --factory my_models:build --weights` -> `validate --factory` -> `package` -> `check-repo` ->
`serve --background` (a real tritonserver) -> a tritonclient gRPC request whose outputs equal
onnxruntime's -> `stop`. The factory module lies in the working folder, as a user's would."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from attndeploy.serving.server import free_ports
from tests.cli.test_train_cli import parse_json, run_cli

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """The factory module `my_models.py` and trained weights other than the factory's own."""
    import torch
    from safetensors.torch import save_file

    from tests.cli import user_models

    cwd = tmp_path_factory.mktemp("user-model")
    shutil.copyfile(user_models.__file__, cwd / "my_models.py")
    trained = user_models.Regressor()
    with torch.no_grad():
        for parameter in trained.parameters():
            parameter.mul_(1.5).add_(0.1)
    save_file({k: v.contiguous() for k, v in trained.state_dict().items()},
              str(cwd / "w.safetensors"))
    return cwd


def test_a_regressor_exports_validates_packages_and_serves_like_onnxruntime(workdir):
    import onnxruntime as ort
    import tritonclient.grpc as grpcclient

    model = ["--factory", "my_models:build", "--weights", "w.safetensors"]
    exported = parse_json(run_cli("export", *model, "--out", "reg.onnx", "--json", cwd=workdir))
    assert exported["outputs"] == ["value", "states"]
    report = parse_json(run_cli("validate", *model, "reg.onnx", "--json", cwd=workdir))
    assert report["passed"] is True
    packaged = parse_json(run_cli("package", "reg.onnx", "--repo", "repo", "--json",
                                  cwd=workdir))
    assert [(m["name"], m["kind"], m["max_batch_size"]) for m in packaged["models"]] == [
        ("reg", "generic", 8)]
    config = (workdir / "repo" / "reg" / "config.pbtxt").read_text()
    assert 'name: "features"' in config and "TYPE_BOOL" in config and "warmup" not in config
    checked = parse_json(run_cli("check-repo", "--repo", "repo", "--json", cwd=workdir))
    assert checked["passed"] is True

    ports = [str(port) for port in free_ports(3)]
    started = parse_json(run_cli("serve", "--repo", "repo", "--background", "--grpc-port",
                                 ports[0], "--http-port", ports[1], "--metrics-port", ports[2],
                                 "--json", cwd=workdir))
    try:
        assert started["models"] == ["reg"]
        session = ort.InferenceSession(str(workdir / "reg.onnx"),
                                       providers=["CPUExecutionProvider"])
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{ports[0]}")
        rng = np.random.default_rng(3)
        for batch, seq in ((1, 4), (3, 9)):
            features = rng.standard_normal((batch, seq, 3)).astype(np.float32)
            mask = np.ones((batch, seq), dtype=bool)
            mask[-1, seq // 2:] = False  # right padding in the last row
            inputs = [grpcclient.InferInput("features", list(features.shape), "FP32"),
                      grpcclient.InferInput("mask", list(mask.shape), "BOOL")]
            inputs[0].set_data_from_numpy(features)
            inputs[1].set_data_from_numpy(mask)
            result = client.infer("reg", inputs)
            want = dict(zip(["value", "states"], session.run(
                ["value", "states"], {"features": features, "mask": mask}), strict=True))
            for name, array in want.items():
                np.testing.assert_array_equal(result.as_numpy(name), array)
        wrong = grpcclient.InferInput("features", [1, 4, 3], "FP64")
        wrong.set_data_from_numpy(np.zeros((1, 4, 3)))
        good_mask = grpcclient.InferInput("mask", [1, 4], "BOOL")
        good_mask.set_data_from_numpy(np.ones((1, 4), dtype=bool))
        with pytest.raises(Exception, match="features"):  # refused, named, server still up
            client.infer("reg", [wrong, good_mask])
        assert client.is_model_ready("reg")
    finally:
        stopped = run_cli("stop", "--repo", "repo", "--json", cwd=workdir)
    assert json.loads(stopped.stdout)["pid"] == started["pid"]
