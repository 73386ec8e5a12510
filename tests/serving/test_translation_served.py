"""Translation models served as `<name>_generate` under the real tritonserver (behind the
request guard `TritonServer` starts): for every variant the served translation of a German
source (gRPC stream and one answer, HTTP `/generate` and `/generate_stream`) is the in-process
greedy `translate` of that source alone, text and ids, alone and with other translations
running beside it; `num_beams` other than 1 and a source beyond the model are their own
INVALID_ARG; `infer --stream`, `loadtest` (its in-process oracle) and `tune` work on it.

Models: one tiny encoder-decoder per variant (tests/models/seq2seq/cases.py, 2+2 layers so
Evolving Attention carries cross rows), trained for a few seconds on word-swap pairs so the
output is real text of varied length, exported and packaged with defaults; one server."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from attndeploy.errors import ServerError
from attndeploy.export.seq2seq import export_seq2seq
from attndeploy.generation.seq2seq_onnx import OnnxSeq2Seq
from attndeploy.models.seq2seq.fit import FitOptions, fit_translation
from attndeploy.serving.client.generate import GenerateParams, grpc_generate, http_generate
from attndeploy.serving.packaging import model_config as cfgmod
from attndeploy.serving.packaging.check_repo import check_repository
from attndeploy.serving.packaging.repository import PackageOptions, package_model
from attndeploy.serving.server import TritonServer, free_ports
from tests.cli.test_train_cli import run_cli
from tests.models.seq2seq.cases import CASES, TINY

pytestmark = [pytest.mark.slow, pytest.mark.integration]

WORDS = [("Katze", "cat"), ("Hund", "dog"), ("Vogel", "bird"), ("Baum", "tree"),
         ("Haus", "house"), ("Buch", "book")]
PAIRS = [(f"der {a} sieht das {b}", f"the {x} sees the {y}")
         for a, x in WORDS for b, y in WORDS if a != b] + [
    (a, x) for a, x in WORDS]
SOURCES = ["der Hund sieht das Haus", "Katze", "der Vogel sieht das Buch der Baum",
           "das Haus sieht"]
NEW = 12


def _translation(name: str, folder: Path) -> None:
    config = {**TINY, **CASES[name], "encoder_layers": 2, "decoder_layers": 2,
              "d_model": 32, "d_ff": 64}
    fitted = fit_translation(PAIRS, config, FitOptions(steps=60, batch_size=16,
                                                       learning_rate=5e-3, warmup_steps=5,
                                                       vocab_size=80, eval_fraction=0.2))
    export_seq2seq(fitted.model, fitted.tokenizer, folder)


class Served:
    def __init__(self, server: TritonServer, root: Path) -> None:
        self.server, self.root = server, root
        self.models = {name: OnnxSeq2Seq(root / name, threads=1) for name in CASES}
        self.grpc = f"127.0.0.1:{server.grpc_port}"
        self.http = f"127.0.0.1:{server.http_port}"

    def expected(self, name: str, source: str, new: int = NEW) -> tuple[str, list[int]]:
        [(text, found)] = self.models[name].translate([source], max_new_tokens=new)
        return text, found.ids


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory):
    """`exports(name)`: the folder of variant `name`'s export, trained on first use."""
    root = tmp_path_factory.mktemp("translation_exports")

    def export(name: str) -> Path:
        if not (root / name).is_dir():
            _translation(name, root / name)
        return root / name

    return export


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, exports) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("translation_served")
    for name in CASES:
        shutil.copytree(exports(name), root / name)
        [written] = package_model(root / name, root / "repo", PackageOptions(name=name))
        assert written.name == f"{name}_generate"
    assert check_repository(root / "repo").passed
    grpc, http, metrics = free_ports()
    with TritonServer(root / "repo", grpc_port=grpc, http_port=http, metrics_port=metrics,
                      log_file=root / "server.log") as server:
        yield Served(server, root)


def test_the_models_translate_into_varied_text(served):
    """The check below is only worth something if the translations differ and end."""
    texts = {served.expected("standard", source)[0] for source in SOURCES}
    assert len(texts) >= 3 and all(texts)


@pytest.mark.parametrize("name", list(CASES))
def test_every_path_gives_the_in_process_translation(served, name):
    model = f"{name}_generate"
    params = GenerateParams(max_tokens=NEW)
    for source in SOURCES:
        text, ids = served.expected(name, source)
        pieces: list[str] = []
        streamed = grpc_generate(served.grpc, model, source, params, on_piece=pieces.append)
        assert (streamed.text, streamed.token_ids) == (text, ids), source
        assert "".join(pieces) == text
        assert streamed.finish_reason == ("length" if len(ids) == NEW else "eos")
        for stream in (False, True):
            answer = http_generate(served.http, model, source, params, stream=stream)
            assert (answer.text, answer.token_ids) == (text, ids), source
        one = grpc_generate(served.grpc, model, source, params, stream=False)
        assert (one.text, one.token_ids) == (text, ids)


@pytest.mark.parametrize("name", list(CASES))
def test_translations_running_together_keep_their_alone_text(served, name):
    """16 streams, 8 at a time: rows join and leave a batch whose sources and target steps
    all differ (cross keys/values right-padded, self caches left-padded)."""
    jobs = [(source, new) for source in SOURCES for new in (3, NEW)] * 2
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda job: grpc_generate(
            served.grpc, f"{name}_generate", job[0], GenerateParams(max_tokens=job[1])), jobs))
    for (source, new), result in zip(jobs, results, strict=True):
        assert (result.text, result.token_ids) == served.expected(name, source, new), source


@pytest.mark.parametrize("fields, message", [
    ({"num_beams": 4}, "num_beams 4 is not served"),
    ({"max_tokens": 17}, "max_tokens must be in 1..16"),
])
def test_a_request_the_model_cannot_serve_is_its_own_invalid_argument(served, fields, message):
    params = GenerateParams(**fields)
    with pytest.raises(ServerError, match=re.escape(message)) as http_error:
        http_generate(served.http, "standard_generate", SOURCES[0], params)
    assert "HTTP 400" in str(http_error.value)
    with pytest.raises(ServerError, match=re.escape(message)):
        grpc_generate(served.grpc, "standard_generate", SOURCES[0], params)


def test_a_source_beyond_the_model_is_refused(served):
    long = " ".join(["der Hund sieht das Haus"] * 8)
    with pytest.raises(ServerError, match="over the cap of 16"):
        grpc_generate(served.grpc, "standard_generate", long, GenerateParams(max_tokens=4))
    assert grpc_generate(served.grpc, "standard_generate", SOURCES[0],
                         GenerateParams(max_tokens=NEW)).text == served.expected(
        "standard", SOURCES[0])[0]


def test_infer_streams_the_translation(served):
    text, _ = served.expected("evolving", SOURCES[0])
    for protocol, url in (("grpc", served.grpc), ("http", served.http)):
        result = run_cli("infer", "--model", "evolving_generate", "--text", SOURCES[0],
                         "--max-tokens", str(NEW), "--stream", "--protocol", protocol,
                         "--url", url, cwd=served.root)
        assert result.returncode == 0, result.stderr
        assert result.stdout == text + "\n"


def test_loadtest_checks_the_served_text_against_the_in_process_translation(served):
    (served.root / "sources.txt").write_text("\n".join(SOURCES) + "\n")
    result = run_cli("loadtest", "--model", "ganet_generate", "--url", served.grpc,
                     "--repo", "repo", "--concurrency", "1,4", "--requests", "12",
                     "--max-tokens", "3-12", "--text-file", "sources.txt",
                     "--check-fraction", "1", "--json-out", "load.json", cwd=served.root)
    assert result.returncode == 0, result.stderr
    report = json.loads((served.root / "load.json").read_text())
    assert report["passed"]
    for level in report["levels"]:
        assert level["errors"] == 0 and level["tokens"] > 0
        assert level["checks"] == {"checked": 12, "mismatched": 0}


def test_tune_measures_a_translation_model(exports, tmp_path):
    package_model(exports("qvi-prefix"), tmp_path / "repo", PackageOptions(name="qvi-prefix"))
    (tmp_path / "sources.txt").write_text("\n".join(SOURCES) + "\n")
    result = run_cli("tune", "--model", "qvi-prefix_generate", "--repo", "repo",
                     "--max-running", "1,4", "--ort-threads", "1", "--concurrency", "4",
                     "--requests", "8", "--text-file", "sources.txt", "--apply",
                     "--json-out", "tune.json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    document = json.loads((tmp_path / "tune.json").read_text())
    for measurement in document["measurements"]:
        [level] = measurement["levels"]
        assert level["errors"] == 0, level  # --max-tokens (32) cut to the model's 16
        assert level["tokens_per_s"] > 0
    config = cfgmod.parse_config(
        (tmp_path / "repo" / "qvi-prefix_generate" / "config.pbtxt").read_text())
    assert config.parameters["MAX_RUNNING"].string_value == str(
        document["chosen"]["max_running"])
    assert check_repository(tmp_path / "repo").passed
