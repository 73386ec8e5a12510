"""export → validate → package → check-repo → serve → infer → loadtest → stop, as a person runs
them: real subprocesses, a real tritonserver on free loopback ports, JSON parsed (never scraped).
The text models (`<name>_text`) are packaged, served and sent raw text over gRPC and HTTP.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attndeploy.serving.server import free_port, free_ports
from tests.cli.test_train_cli import assert_one_line_error, parse_json, run_cli
from tests.runtime.records import assert_same_record

pytestmark = pytest.mark.integration

TINY = ["--d-model", "16", "--heads", "2", "--layers", "2", "--d-ff", "32", "--steps", "3",
        "--batch-size", "16", "--dataset", "sparse_evidence", "--n-train", "48", "--n-eval", "24",
        "--max-seq", "64"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """Tiny GA-Net and standard checkpoints, exported, packaged (both flavours and the text
    models)."""
    cwd = tmp_path_factory.mktemp("pipeline")
    for variant in ("ganet", "standard"):
        parse_json(run_cli("train", "--variant", variant, *TINY, "--out", variant, "--json",
                           cwd=cwd))
        parse_json(run_cli("export", variant, "--out", f"{variant}.onnx", "--json", cwd=cwd))
    packaged = parse_json(run_cli("package", "ganet", "standard.onnx", "--repo", "repo",
                                  "--flavor", "both", "--json", cwd=cwd))
    assert {m["name"] for m in packaged["models"]} == {
        "ganet_python", "ganet_onnxruntime", "ganet_text", "standard_python",
        "standard_onnxruntime", "standard_text"}
    assert {m["name"]: m["id_model"] for m in packaged["models"] if m["kind"] == "text"} == {
        "ganet_text": "ganet_python", "standard_text": "standard_python"}
    # each runs its python flavour's ONNX itself
    assert {m["text_call"] for m in packaged["models"] if m["kind"] == "text"} == {"onnxruntime"}
    (cwd / "lines.txt").write_text("w1 w2 alpha w3 amber\nbravo w1\n\nW7, w8 w9 w10 alpha\n")
    return cwd


@pytest.fixture(scope="module")
def server(workdir):
    """`serve --background` on free ports; stopped (and checked stopped) at the end."""
    ports = [str(port) for port in free_ports(3)]
    started = parse_json(run_cli("serve", "--repo", "repo", "--background", "--grpc-port",
                                 ports[0], "--http-port", ports[1], "--metrics-port", ports[2],
                                 "--json", cwd=workdir))
    yield started
    stopped = run_cli("stop", "--repo", "repo", "--json", cwd=workdir)
    if stopped.returncode == 0:
        assert json.loads(stopped.stdout)["pid"] == started["pid"]


def test_export_reports_one_custom_node_per_layer_and_the_pooling(workdir):
    result = parse_json(run_cli("export", "ganet", "--out", "again.onnx", "--json", cwd=workdir))
    assert result["custom_nodes"] == {"GatedAttention": 2, "GatedAttentionPooling": 1}
    assert (workdir / "again.onnx").is_file()


def test_validate_passes_and_writes_the_json_report(workdir):
    result = run_cli("validate", "ganet", "ganet.onnx", "--json-out", "parity.json", cwd=workdir)
    assert result.returncode == 0, result.stderr
    report = json.loads((workdir / "parity.json").read_text())
    assert report["passed"] is True
    assert report["gates"]["flips"] == 0


def test_validate_refuses_an_onnx_file_of_another_checkpoint(workdir):
    result = run_cli("validate", "standard", "ganet.onnx", cwd=workdir)
    assert_one_line_error(result, "validation", "different checkpoint")


def test_check_repo_passes_on_the_packaged_repository(workdir):
    report = json.loads(run_cli("check-repo", "--repo", "repo", "--json", cwd=workdir).stdout)
    assert report["passed"] is True and len(report["models"]) == 6


def test_package_refuses_to_overwrite_without_force(workdir):
    result = run_cli("package", "ganet", "--repo", "repo", "--flavor", "both", cwd=workdir)
    assert_one_line_error(result, "repository", "already exist")


def test_serve_leaves_out_the_onnxruntime_flavour_and_serves_the_python_one(server):
    assert sorted(server["models"]) == ["ganet_python", "ganet_text", "standard_python",
                                        "standard_text"]
    assert server["host"] == "127.0.0.1"


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_infer_text_to_the_text_model_equals_infer_text_to_the_id_model(workdir, server,
                                                                         protocol):
    url = server["grpc_url"] if protocol == "grpc" else server["http_url"]
    text = "w1 w2 alpha w3 amber"
    by_id = parse_json(run_cli("infer", "--model", "ganet_python", "--url", url, "--protocol",
                               protocol, "--repo", "repo", "--text", text, "--json",
                               cwd=workdir))
    by_text = parse_json(run_cli("infer", "--model", "ganet_text", "--url", url, "--protocol",
                                 protocol, "--repo", "repo", "--text", text, "--json",
                                 cwd=workdir))
    assert (by_text["model"], by_id["model"]) == ("ganet_text", "ganet_python")
    assert_same_record(by_text, by_id, atol=1e-5)


def test_infer_text_refuses_a_bad_text_in_one_line(workdir, server):
    result = run_cli("infer", "--model", "standard_text", "--url", server["grpc_url"],
                     "--repo", "repo", "--text", "   ", cwd=workdir)
    assert_one_line_error(result, "server", "text 0 has no tokens")


def test_loadtest_over_http_sends_the_text_file_to_the_text_model(workdir, server):
    result = run_cli("loadtest", "--model", "ganet_text", "--protocol", "http", "--url",
                     server["http_url"], "--repo", "repo", "--text-file", "lines.txt",
                     "--concurrency", "4", "--window", "0.5", "--max-windows", "3",
                     "--warmup-requests", "5", "--check-fraction", "0.5", "--json", "-",
                     cwd=workdir)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["passed"] is True and report["config"]["protocol"] == "http"
    (level,) = report["levels"]
    assert level["error_count"] == 0
    assert level["checks"]["done"] > 0 and level["checks"]["failed"] == 0


def test_infer_text_returns_a_label_and_the_open_gate_tokens(workdir, server):
    result = parse_json(run_cli("infer", "--model", "ganet_python", "--url", server["grpc_url"],
                                "--repo", "repo", "--text", "w1 w2 alpha w3 amber", "--json",
                                cwd=workdir))
    assert result["tokens"] == ["w1", "w2", "alpha", "w3", "amber"]
    assert result["label"] in result["probabilities"]
    assert abs(sum(result["probabilities"].values()) - 1.0) < 1e-5
    assert max(result["logits"], key=result["logits"].get) == result["label"]
    assert result["attended"]  # the rescue opens at least one gate
    assert all(token in result["tokens"] for token in result["attended"])


def test_loadtest_json_reports_every_level_without_errors(workdir, server):
    result = run_cli("loadtest", "--model", "standard_python", "--url", server["grpc_url"],
                     "--repo", "repo", "--concurrency", "1,4", "--window", "0.5",
                     "--max-windows", "3", "--warmup-requests", "5", "--check-fraction", "0.2",
                     "--json", "-", "--plot", "lt.png", cwd=workdir)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["passed"] is True
    assert [level["concurrency"] for level in report["levels"]] == [1, 4]
    for level in report["levels"]:
        assert level["error_count"] == 0
        assert level["checks"]["done"] > 0 and level["checks"]["failed"] == 0
        for key in ("p50", "p90", "p95", "p99", "avg"):
            assert level["latency_ms"][key] > 0
        for key in ("queue_us", "compute_input_us", "compute_infer_us", "compute_output_us",
                    "avg_batch_size"):
            assert level["server"][key] is not None
    assert (workdir / "lt.png").stat().st_size > 0


def test_serve_refuses_a_port_that_is_in_use(workdir, server):
    result = run_cli("serve", "--repo", "repo", "--grpc-port", str(server["grpc_port"]),
                     "--http-port", str(free_port()), "--metrics-port", str(free_port()),
                     cwd=workdir)
    assert result.returncode == 1
    assert f"port {server['grpc_port']}" in result.stderr and "Traceback" not in result.stderr


def wait_until_requests_arrive(url: str, model: str, timeout_s: float = 120.0) -> None:
    """Return once `model` has run more than its warm-up request: the load test is under way
    (a fixed sleep can end before a slow machine has even imported the client)."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            stats = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
            if int(stats.get("inference_count", 0)) > 1:
                return
            time.sleep(0.1)
    finally:
        client.close()
    raise AssertionError(f"no request reached {model} within {timeout_s} s")


def test_loadtest_ends_with_a_clear_error_when_the_server_dies(workdir):
    ports = [str(port) for port in free_ports(3)]
    started = parse_json(run_cli("serve", "--repo", "repo", "--background", "--model",
                                 "standard_python", "--state-file", "victim.json",
                                 "--grpc-port", ports[0], "--http-port", ports[1],
                                 "--metrics-port", ports[2], "--json", cwd=workdir))
    test = subprocess.Popen(
        [sys.executable, "-m", "attndeploy", "loadtest", "--model", "standard_python", "--url",
         started["grpc_url"], "--concurrency", "4", "--window", "2", "--max-windows", "10",
         "--repo", "repo"],
        cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until_requests_arrive(started["grpc_url"], "standard_python")
    # The server leads its own process group; killing the group takes its backend stubs too.
    os.killpg(started["pid"], signal.SIGKILL)
    killed_at = time.monotonic()
    _, stderr = test.communicate(timeout=60)
    assert test.returncode == 1
    assert time.monotonic() - killed_at < 30
    assert "error (server)" in stderr and "Traceback" not in stderr


def test_infer_and_loadtest_fail_fast_when_no_server_answers(workdir):
    url = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    infer = run_cli("infer", "--model", "ganet_python", "--url", url, "--ids", "3,4", cwd=workdir)
    load = run_cli("loadtest", "--model", "ganet_python", "--url", url, "--concurrency", "1",
                   cwd=workdir)
    assert time.monotonic() - started < 60
    for result in (infer, load):
        assert result.returncode == 1
        assert "No Triton server answers" in result.stderr and "Traceback" not in result.stderr


def test_stop_without_a_recorded_server_is_a_clear_error(tmp_path):
    (tmp_path / "repo").mkdir()
    result = run_cli("stop", "--repo", "repo", cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
