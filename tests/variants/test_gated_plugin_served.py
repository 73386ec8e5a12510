"""A gated plug-in variant (`tests/variants/fifth_variant/sieve`, in no list of names) under the
load tester and the tuner against a real tritonserver: their oracle reads whether the model is
gated from its graph (a `gates` output), so it expects, and checks, the text model's `attended`.

Only the export needs the variant (it runs in a copy of the package with the variant's folder
added); packaging, serving, the load test and the tuning read the ONNX file alone."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.variants.test_fifth_variant import _tree_with

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NAME = "sieve"
TEXT = f"{NAME}_text"

EXPORT = r"""
import sys
from pathlib import Path
import torch
from attndeploy.checkpoint import save_checkpoint
from attndeploy.config import ModelConfig
from attndeploy.export.exporter import export_checkpoint
from attndeploy.models import build_model
from attndeploy.runtime.tokenizer import WordTokenizer

out = Path(sys.argv[1])
vocab = ["<pad>", "<unk>", *(f"w{i}" for i in range(2, 24))]
config = ModelConfig.from_dict({"vocab_size": len(vocab), "num_labels": 2, "variant": "sieve",
                                "d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32,
                                "max_seq": 16, "sieve": {"bias_init": 0.0}})
torch.manual_seed(0)
checkpoint = save_checkpoint(build_model(config), out / "ckpt", label_names=("a", "b"),
                             tokenizer=WordTokenizer(vocab))
export_checkpoint(checkpoint, out / "sieve.onnx")
"""


@pytest.fixture(scope="module")
def sieve_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sieve")
    env = _tree_with(root, NAME)
    done = subprocess.run([sys.executable, "-c", EXPORT, str(root)], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return root / "sieve.onnx"


def _repo(onnx_path: Path, root: Path) -> Path:
    from attndeploy.serving.packaging.repository import PackageOptions, package_model

    package_model(onnx_path, root / "repo", PackageOptions(name=NAME))
    return root / "repo"


@pytest.fixture
def expected_outputs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[set[str]]]:
    """The names of the outputs the load tester's oracle compared, one set per checked answer."""
    from attndeploy.serving.loadtest import level

    seen: list[set[str]] = []
    compare = level.compare_outputs

    def spy(actual: Any, expected: Any, **kwargs: Any) -> Any:
        seen.append(set(expected))
        return compare(actual, expected, **kwargs)

    monkeypatch.setattr(level, "compare_outputs", spy)
    yield seen


def test_the_load_tester_checks_a_gated_plug_in_s_attended(sieve_onnx: Path, tmp_path: Path,
                                                           expected_outputs: list[set[str]]):
    from attndeploy.serving.loadtest import LoadTestConfig, run_load_test
    from attndeploy.serving.server import TritonServer, free_ports

    repo = _repo(sieve_onnx, tmp_path)
    grpc, http, metrics = free_ports(3)
    with TritonServer(repo, grpc_port=grpc, http_port=http, metrics_port=metrics) as server:
        report = run_load_test(LoadTestConfig(
            model=TEXT, url=server.grpc_url, concurrency=(2,), seq_lengths=(8,), window_s=0.5,
            max_windows=3, check_fraction=0.2, onnx_path=sieve_onnx), progress=False)
    assert report.passed, report.failures
    checks = report.levels[0].checks
    assert checks.done > 0 and checks.failed == 0
    assert expected_outputs and all("attended" in names for names in expected_outputs)


def test_the_tuner_checks_a_gated_plug_in_s_attended(sieve_onnx: Path, tmp_path: Path,
                                                     expected_outputs: list[set[str]]):
    from attndeploy.serving.tune import SearchSpace, TuneOptions, run_tune

    repo = _repo(sieve_onnx, tmp_path)
    one = SearchSpace(max_batch_size=(8,), max_queue_delay_us=(500,), instances=(1,),
                      threads=(1,), preferred=("none",), text_instances=(1,),
                      text_queue_delay_us=(0,))
    result = run_tune(TuneOptions(
        repo=repo, model=TEXT, concurrency=(2,), space=one, seq_lengths=(8,), budget_minutes=2.0,
        window_s=0.5, stable_windows=2, max_windows=3, warmup_requests=5, check_fraction=0.2,
        in_process_seconds=0.2, finalists=1, min_gain=0.0, workdir=tmp_path / "work"),
        progress=False)
    for measurement in result.measurements:
        assert measurement.failure is None, measurement
        assert all(lv.checks_done > 0 and lv.checks_failed == 0 for lv in measurement.levels)
    assert expected_outputs and all("attended" in names for names in expected_outputs)
