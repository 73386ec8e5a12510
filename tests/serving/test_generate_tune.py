"""`tune` of a generate model on the real server (attndeploy.serving.tune.generate): each
candidate (largest running batch x threads) is served from a scratch copy and measured; the
chosen one is the highest tokens/s within the inter-token budget; `--apply` writes it into the
repository's config, which check-repo still passes, and keeps the old one."""

from __future__ import annotations

import json

import pytest

from attndeploy.export.decoder import export_decoder
from attndeploy.generation.tokenizer import LMTokenizer
from attndeploy.serving.packaging import model_config as cfgmod
from attndeploy.serving.packaging.check_repo import check_repository
from attndeploy.serving.packaging.repository import PackageOptions, package_model
from attndeploy.serving.tune.generate import (
    GenerateCandidate,
    GenerateMeasurement,
    GenerateTuneResult,
)
from tests.cli.test_train_cli import run_cli
from tests.generation.cases import tiny_model

TOKENIZER = LMTokenizer.build(["the cat sat on the mat", "a dog ran to the park ."])


def test_the_choice_is_the_fastest_within_the_inter_token_budget():
    from attndeploy.serving.loadtest.generation import GenerateLevel

    def level(tokens_per_s: float, itl_p95: float) -> GenerateLevel:
        return GenerateLevel("concurrency", 4, 8, 0, 1.0, int(tokens_per_s),
                             {"p50": 1.0, "p95": 1.0, "p99": 1.0},
                             {"p50": 1.0, "p95": itl_p95, "p99": itl_p95})

    fast, slow = GenerateCandidate(8, 1), GenerateCandidate(1, 1)
    result = GenerateTuneResult("m_generate", itl_budget_ms=None, measurements=[
        GenerateMeasurement(slow, [level(100, 5.0)]),
        GenerateMeasurement(fast, [level(300, 20.0)])])
    assert result.chosen == fast
    result.itl_budget_ms = 10.0
    assert result.chosen == slow
    result.itl_budget_ms = 1.0
    assert result.chosen is None


@pytest.mark.slow
@pytest.mark.integration
def test_tune_measures_each_candidate_and_applies_the_chosen_one(tmp_path):
    export_decoder(tiny_model("standard", vocab=len(TOKENIZER)), TOKENIZER, tmp_path / "lm.onnx")
    package_model(tmp_path / "lm.onnx", tmp_path / "repo", PackageOptions())
    result = run_cli("tune", "--model", "lm_generate", "--repo", "repo", "--max-running", "1,4",
                     "--ort-threads", "1", "--generate-instances", "1,2", "--concurrency", "4",
                     "--requests", "8", "--max-tokens", "8", "--apply", "--json-out",
                     "tune.json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    document = json.loads((tmp_path / "tune.json").read_text())
    assert [(m["max_running"], m["threads"], m["instances"])
            for m in document["measurements"]] == [(1, 1, 1), (4, 1, 1), (1, 1, 2), (4, 1, 2)]
    for measurement in document["measurements"]:
        [level] = measurement["levels"]
        assert level["errors"] == 0 and level["tokens_per_s"] > 0
    chosen = document["chosen"]
    assert document["applied"]
    config = cfgmod.parse_config((tmp_path / "repo" / "lm_generate" / "config.pbtxt").read_text())
    assert config.parameters["MAX_RUNNING"].string_value == str(chosen["max_running"])
    assert config.instance_group[0].count == chosen["instances"]
    assert (tmp_path / "repo" / "lm_generate" / "config.pbtxt.previous").is_file()
    assert check_repository(tmp_path / "repo").passed
