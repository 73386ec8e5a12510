"""The manifests rehearsed against the real local tritonserver (see rehearsal.py): the pod's
command line, its probes and ports, and one inference through the Service's port mapping."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import yaml

from attndeploy.deploy import KubernetesOptions, deploy_kubernetes
from attndeploy.serving.packaging import triton_releases
from attndeploy.serving.server import TritonServer, free_ports
from attndeploy.serving.server.restricted import ADMIN_KEY_HEADER, restricted_api_arguments

from .golden_cases import ONNXRUNTIME_MODEL, PYTHON_MODEL, build_sample_repository
from .rehearsal import PROBE_BUDGET_S, LocalPod, http_status, rehearse, wait_for_probe

pytestmark = pytest.mark.integration

# tritonserver flags of `attndeploy serve` that only make sense on this machine: the wheel's
# backend folder, and the python backend's shared-memory prefix that `stop` cleans up after.
LOCAL_ONLY_FLAGS = {"--backend-directory", "--backend-config"}


# The release of the local tritonserver (2.51): the manifests rehearsed here name its image, and
# differ from the default image's only there (test_the_default_manifests_differ_only_in_image).
LOCAL_RELEASE = triton_releases.TRITON_RELEASES["24.10"]
LOCAL_IMAGE = f"nvcr.io/nvidia/tritonserver:{LOCAL_RELEASE.ngc}-py3"


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The sample repository (both flavours) and the manifests for it on the local release."""
    root = tmp_path_factory.mktemp("rehearsal")
    repo = build_sample_repository(root)
    deploy_kubernetes(repo, root / "deploy", KubernetesOptions(image=LOCAL_IMAGE))
    deploy_kubernetes(repo, root / "default", KubernetesOptions())
    return repo, root / "deploy"


def test_the_default_manifests_differ_only_in_image(deployed: tuple[Path, Path]) -> None:
    def without_images(text: str) -> str:
        return re.sub(r"tritonserver:\d\d\.\d\d-py3(-onnxruntime[0-9.]+)?", "IMAGE", text)

    rehearsed = deployed[1]
    for path in sorted(rehearsed.glob("*.yaml")):
        default = rehearsed.parent / "default" / path.name
        assert without_images(path.read_text()) == without_images(default.read_text()), path.name


def manifest(out: Path, name: str) -> dict:
    (document,) = yaml.safe_load_all((out / name).read_text())
    return document


@pytest.fixture(scope="module")
def pod(deployed: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[tuple[LocalPod, dict]]:
    repo, out = deployed
    deployment = manifest(out, "deployment.yaml")
    with rehearse(deployment, manifest(out, "service.yaml"), out / "images" / "models.Dockerfile",
                  repo, tmp_path_factory.mktemp("pod")) as local:
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        yield local, container


def test_the_probes_pass_on_the_paths_and_ports_of_the_manifest(pod) -> None:
    local, container = pod
    assert container["startupProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    wait_for_probe(local, container["startupProbe"], PROBE_BUDGET_S)
    wait_for_probe(local, container["readinessProbe"], PROBE_BUDGET_S)  # every model loaded
    wait_for_probe(local, container["livenessProbe"], 5)


def test_one_inference_through_the_service_equals_onnxruntime(pod, deployed) -> None:
    import tritonclient.grpc as grpcclient

    local, container = pod
    repo, _ = deployed
    wait_for_probe(local, container["readinessProbe"], PROBE_BUDGET_S)
    ids = np.array([[3, 1, 4, 1, 5]], dtype=np.int64)
    mask = np.ones_like(ids)
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{local.services[8001]}")
    try:
        inputs = [grpcclient.InferInput("input_ids", list(ids.shape), "INT64"),
                  grpcclient.InferInput("attention_mask", list(mask.shape), "INT64")]
        inputs[0].set_data_from_numpy(ids)
        inputs[1].set_data_from_numpy(mask)
        result = client.infer(PYTHON_MODEL, inputs, client_timeout=30)
    finally:
        client.close()
    session = ort.InferenceSession(str(repo / PYTHON_MODEL / "1" / "model.onnx"),
                                   providers=["CPUExecutionProvider"])
    (expected,) = session.run(["logits"], {"input_ids": ids, "attention_mask": mask})
    np.testing.assert_allclose(result.as_numpy("logits"), expected, rtol=1e-5, atol=1e-6)


def admin_key(local: LocalPod) -> str:
    """The key the start script drew, read where only it is: the server's command line."""
    keys = {arg.rsplit(f"{ADMIN_KEY_HEADER}=", 1)[1] for arg in local.argv()
            if f":{ADMIN_KEY_HEADER}=" in arg}
    (key,) = keys
    return key


def test_the_service_serves_only_the_copied_models_and_loads_none(pod) -> None:
    local, container = pod
    wait_for_probe(local, container["readinessProbe"], PROBE_BUDGET_S)
    http = f"http://127.0.0.1:{local.services[8000]}"
    key = {ADMIN_KEY_HEADER: admin_key(local)}  # the drawn key opens the repository API
    status, body = http_status(f"{http}/v2/repository/index", method="POST", headers=key)
    assert status == 200
    assert [entry["name"] for entry in json.loads(body)] == [PYTHON_MODEL]
    status, _ = http_status(f"{http}/v2/repository/models/{ONNXRUNTIME_MODEL}/load",
                            method="POST", headers=key)
    assert status != 200  # --model-control-mode=none: the repository API loads nothing
    status, body = http_status(f"{http}/v2")
    assert status == 200
    version = json.loads(body)["version"]
    # the local server is the release of the image the rehearsed manifests name
    assert version.startswith(LOCAL_RELEASE.server + "."), version


def test_the_admin_apis_answer_only_the_key_drawn_at_start_through_the_service(pod) -> None:
    """The container's start script draws a key and execs tritonserver with the restricted-API
    flags holding it: the same process (pid 1 in a pod) is then tritonserver, the key is 64 hex
    digits in no env var and not in the log, and without it a client gets 403 from the repository
    index and from shared-memory registration; inference stays open."""
    local, container = pod
    wait_for_probe(local, container["readinessProbe"], PROBE_BUDGET_S)
    argv = local.argv()
    assert Path(argv[0]).name == "tritonserver"  # exec'd: the shell is gone, signals reach it
    key = admin_key(local)
    assert re.fullmatch(r"[0-9a-f]{64}", key)
    assert argv[-2:] == restricted_api_arguments(key)
    assert not any(key in arg for arg in local.command)  # drawn in the pod, not given to it
    environ = Path(f"/proc/{local.process.pid}/environ").read_bytes()
    assert key.encode() not in environ  # an unexported shell variable
    assert key not in local.log.read_text(errors="replace")  # never printed
    http = f"http://127.0.0.1:{local.services[8000]}"
    register = json.dumps({"key": "/attndeploy-rehearsal", "offset": 0,
                           "byte_size": 64}).encode()
    for headers in (None, {ADMIN_KEY_HEADER: "0" * 64}):
        status, body = http_status(f"{http}/v2/repository/index", method="POST",
                                   headers=headers)
        assert status == 403 and b"restricted" in body
        status, body = http_status(f"{http}/v2/systemsharedmemory/region/r/register",
                                   method="POST", headers=headers, data=register)
        assert status == 403 and b"restricted" in body
    status, _ = http_status(f"{http}/v2/models/{PYTHON_MODEL}/ready")
    assert status == 200  # health and metadata stay open


def test_metrics_are_scraped_through_the_service_port(pod) -> None:
    local, container = pod
    wait_for_probe(local, container["readinessProbe"], PROBE_BUDGET_S)
    status, body = http_status(f"http://127.0.0.1:{local.services[8002]}/metrics")
    assert status == 200
    assert f'nv_inference_request_success{{model="{PYTHON_MODEL}"'.encode() in body


def test_the_manifest_runs_the_flags_of_attndeploy_serve(pod, deployed, tmp_path: Path) -> None:
    """The flag names of the pod's tritonserver, as it runs after its start script, are those
    `attndeploy serve` runs locally."""
    local, container = pod
    wait_for_probe(local, container["startupProbe"], PROBE_BUDGET_S)
    repo, _ = deployed
    grpc, http, metrics = free_ports()
    server = TritonServer(repo, grpc_port=grpc, http_port=http, metrics_port=metrics,
                          log_file=tmp_path / "serve.log", models=[PYTHON_MODEL])
    try:
        server.start()
        argv = Path(f"/proc/{server.pid}/cmdline").read_bytes().decode().split("\0")
    finally:
        server.stop()
    serve_flags = {arg.split("=", 1)[0] for arg in argv[1:] if arg}
    pod_flags = {arg.split("=", 1)[0] for arg in local.argv()[1:]}
    assert pod_flags - LOCAL_ONLY_FLAGS == serve_flags - LOCAL_ONLY_FLAGS
    assert "--model-control-mode=none" in container["args"]
