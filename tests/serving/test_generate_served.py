"""Generate models (`<name>_generate`) under the real tritonserver, behind the request guard
that `TritonServer` starts by default: for every decoder case the greedy tokens of a gRPC
stream, HTTP `/generate` and HTTP `/generate_stream` are in-process `generate`'s, alone and
with other streams running beside them; a bad request is its own INVALID_ARG; streams
cancelled halfway leave no running sequence behind; `infer --stream` prints the text.

Models: tiny random decoders (tests/generation/cases.py) with a word tokenizer, exported and
packaged with `package_model` defaults, one server for the module."""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from attndeploy.errors import ServerError
from attndeploy.export.decoder import export_decoder
from attndeploy.generation.loop import DecoderModel
from attndeploy.generation.tokenizer import LMTokenizer
from attndeploy.serving.client.generate import GenerateParams, grpc_generate, http_generate
from attndeploy.serving.packaging.check_repo import check_repository
from attndeploy.serving.packaging.repository import PackageOptions, package_model
from attndeploy.serving.server import TritonServer, free_ports
from tests.generation.cases import CASES, tiny_model

pytestmark = [pytest.mark.slow, pytest.mark.integration]

TOKENIZER = LMTokenizer.build(["the cat sat on the mat", "a dog ran to the park .",
                               "my friend sees the river by the house"])
PROMPTS = ["the cat", "a dog ran to the park", "my friend sees", "mat"]
NEW = 10


class Served:
    def __init__(self, server: TritonServer, root: Path) -> None:
        self.server, self.root = server, root
        self.models = {name: DecoderModel(root / f"{name}.onnx", threads=1) for name in CASES}
        self.grpc = f"127.0.0.1:{server.grpc_port}"
        self.http = f"127.0.0.1:{server.http_port}"

    def expected(self, name: str, prompt: str, new: int = NEW) -> list[int]:
        return self.models[name].generate(prompt, new)[0].token_ids

    def gauge(self, metric: str, labels: str) -> float:
        """A generate model's gauge on the metrics port (0 when not set yet)."""
        url = f"http://127.0.0.1:{self.server.metrics_port}/metrics"
        text = urllib.request.urlopen(url, timeout=10).read().decode()  # noqa: S310
        match = re.search(re.escape(f"{metric}{{{labels}}} ") + r"(\S+)", text)
        return float(match[1]) if match else 0.0

    def active(self, name: str) -> float:
        return self.gauge("attndeploy_generate_active_sequences",
                          f'model="{name}_generate"')

    def stub_rss_mb(self, name: str) -> float:
        """Resident memory of this server's python-backend process of `<name>_generate` (the
        server runs a copy of the repository, so the stub is found by its parent and model)."""
        model_py = f"/{name}_generate/1/model.py".encode()
        for proc in Path("/proc").iterdir():
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
                status = (proc / "status").read_text()
                parent = int(re.search(r"PPid:\s+(\d+)", status)[1])
                if (b"triton_python_backend_stub" in argv[0] and parent == self.server.pid
                        and any(a.endswith(model_py) for a in argv)):
                    return int(re.search(r"VmRSS:\s+(\d+)", status)[1]) / 1024
            except (OSError, TypeError):
                continue
        raise AssertionError(f"no python-backend process serves {name}_generate")

    def cancelled(self, name: str) -> float:
        return self.gauge("attndeploy_generate_finished_sequences",
                          f'model="{name}_generate",reason="cancelled"')


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("generate_served")
    for name in CASES:
        export_decoder(tiny_model(name, vocab=len(TOKENIZER), seed=3), TOKENIZER,
                       root / f"{name}.onnx")
        written = package_model(root / f"{name}.onnx", root / "repo",
                                PackageOptions(name=name, max_new_tokens=24))
        assert [m.name for m in written] == [f"{name}_generate"]
    assert check_repository(root / "repo").passed
    grpc, http, metrics = free_ports()
    with TritonServer(root / "repo", grpc_port=grpc, http_port=http, metrics_port=metrics,
                      log_file=root / "server.log") as server:
        yield Served(server, root)


@pytest.mark.parametrize("name", list(CASES))
def test_every_path_gives_the_in_process_greedy_tokens(served, name):
    model = f"{name}_generate"
    params = GenerateParams(max_tokens=NEW)
    for prompt in PROMPTS:
        expected = served.expected(name, prompt)
        pieces: list[str] = []
        streamed = grpc_generate(served.grpc, model, prompt, params, on_piece=pieces.append)
        assert streamed.token_ids == expected, prompt
        assert "".join(pieces) == streamed.text
        assert streamed.finish_reason in ("eos", "length")
        assert http_generate(served.http, model, prompt, params).token_ids == expected
        assert http_generate(served.http, model, prompt, params,
                             stream=True).token_ids == expected
        one = grpc_generate(served.grpc, model, prompt, params, stream=False)
        assert one.token_ids == expected and len(one.arrivals) <= 1


@pytest.mark.parametrize("name", ["standard", "ganet-mlp", "evolving"])
def test_streams_running_together_keep_their_alone_tokens(served, name):
    model = f"{name}_generate"
    jobs = [(prompt, new) for prompt in PROMPTS for new in (6, 15)] * 2  # 16 streams
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda job: grpc_generate(
            served.grpc, model, job[0], GenerateParams(max_tokens=job[1])), jobs))
    for (prompt, new), result in zip(jobs, results, strict=True):
        assert result.token_ids == served.expected(name, prompt, new), prompt


def test_a_seeded_sampled_stream_draws_what_it_draws_in_process(served):
    params = GenerateParams(max_tokens=12, temperature=1.2, top_k=6, seed=5)
    got = grpc_generate(served.grpc, "standard_generate", "the cat", params)
    assert got.token_ids == served.models["standard"].generate(
        "the cat", 12, temperature=1.2, top_k=6, seed=5)[0].token_ids


@pytest.mark.parametrize("fields, message", [
    ({"text_input": ""}, "text_input is empty"),
    ({"text_input": "the cat", "max_tokens": 0}, "max_tokens must be in 1..24"),
    ({"text_input": "the cat", "max_tokens": 25}, "max_tokens must be in 1..24"),
    ({"text_input": " ".join(["the cat"] * 20)}, "over the cap of 31"),
    ({"text_input": " ".join(["the cat"] * 12), "max_tokens": 20}, "beyond the model's context"),
    ({"text_input": "the cat", "top_p": 1.5}, "top-p must be in"),
    ({"text_input": "the cat", "stop": ""}, "stop must not be empty"),
])
def test_a_bad_request_is_its_own_invalid_argument(served, fields, message):
    prompt = fields.pop("text_input")
    params = GenerateParams(**fields)
    with pytest.raises(ServerError, match=re.escape(message)) as http_error:
        http_generate(served.http, "standard_generate", prompt, params)
    assert "HTTP 400" in str(http_error.value)
    with pytest.raises(ServerError, match=re.escape(message)):
        grpc_generate(served.grpc, "standard_generate", prompt, params)


def test_bad_utf8_is_refused_and_the_model_serves_on(served):
    with pytest.raises(ServerError, match="text_input is not UTF-8"):
        grpc_generate(served.grpc, "standard_generate", b"the \xff cat",
                      GenerateParams(max_tokens=3))
    assert grpc_generate(served.grpc, "standard_generate", "the cat",
                         GenerateParams(max_tokens=NEW)).token_ids == served.expected(
        "standard", "the cat")


def test_streams_cancelled_halfway_leave_no_sequence_running(served):
    name = "standard"
    prompt = next(p for p in (" ".join([q] * 2) for q in PROMPTS)
                  if len(served.expected(name, p, 20)) == 20)
    cancelled_before = served.cancelled(name)
    grpc_generate(served.grpc, f"{name}_generate", prompt, GenerateParams(max_tokens=20))
    rss_before = served.stub_rss_mb(name)
    with ThreadPoolExecutor(10) as pool:
        results = list(pool.map(lambda _: grpc_generate(
            served.grpc, f"{name}_generate", prompt, GenerateParams(max_tokens=20),
            cancel_after=5), range(50)))
    assert all(r.finish_reason == "cancelled" and len(r.token_ids) >= 5 for r in results)
    deadline = time.monotonic() + 20
    while served.active(name) != 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert served.active(name) == 0
    # the server saw the cancellations (a stream it ran to the end would count as "length")
    assert served.cancelled(name) > cancelled_before
    # the caches of the cancelled sequences are gone: the server process is back to its size
    assert served.stub_rss_mb(name) < rss_before + 20
    assert grpc_generate(served.grpc, f"{name}_generate", prompt,
                         GenerateParams(max_tokens=20)).token_ids == served.expected(
        name, prompt, 20)


def test_infer_prints_the_stream_as_it_comes(served):
    from tests.cli.test_train_cli import run_cli

    expected = served.models["standard"].generate("the cat", NEW)[0].text
    for protocol, url in (("grpc", served.grpc), ("http", served.http)):
        result = run_cli("infer", "--model", "standard_generate", "--text", "the cat",
                         "--max-tokens", str(NEW), "--stream", "--protocol", protocol,
                         "--url", url, cwd=served.root)
        assert result.returncode == 0, result.stderr
        assert result.stdout == expected + "\n"
    assert np.isfinite(served.active("standard"))


def test_loadtest_reports_ttft_and_inter_token_latency_per_level(served):
    import json

    from tests.cli.test_train_cli import run_cli

    (served.root / "prompts.txt").write_text("\n".join(PROMPTS) + "\n")
    result = run_cli("loadtest", "--model", "standard_generate", "--url", served.grpc,
                     "--onnx", str(served.root / "standard.onnx"), "--concurrency", "1,4",
                     "--request-rate", "50", "--requests", "12", "--max-tokens", "4-12",
                     "--text-file", "prompts.txt", "--check-fraction", "0.5",
                     "--json-out", "load.json", "--plot", "load.png", cwd=served.root)
    assert result.returncode == 0, result.stderr
    report = json.loads((served.root / "load.json").read_text())
    assert report["passed"] and report["kind"] == "generate"
    assert [(lv["mode"], lv["value"]) for lv in report["levels"]] == [
        ("concurrency", 1), ("concurrency", 4), ("request_rate", 50)]
    for level in report["levels"]:
        assert level["errors"] == 0 and level["tokens"] > 0 and level["tokens_per_s"] > 0
        assert level["ttft_ms"]["p50"] > 0 and level["itl_ms"]["p99"] >= level["itl_ms"]["p50"]
        assert level["checks"]["checked"] == 6 and level["checks"]["mismatched"] == 0
    assert (served.root / "load.png").read_bytes()[:4] == b"\x89PNG"


def test_loadtest_refuses_more_new_tokens_than_the_model_serves(served):
    """The served model gives at most 24 new tokens (max_tokens must be in 1..24): a range above
    it is one line before any request, not a report of levels full of errors."""
    from tests.cli.test_train_cli import run_cli

    result = run_cli("loadtest", "--model", "standard_generate", "--url", served.grpc,
                     "--concurrency", "1", "--requests", "2", "--max-tokens", "4-40",
                     "--json-out", "too_many.json", cwd=served.root)
    assert result.returncode != 0
    assert "at most 24 new tokens" in result.stderr and "Traceback" not in result.stderr
    assert not (served.root / "too_many.json").exists()
