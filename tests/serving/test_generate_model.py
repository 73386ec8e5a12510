"""Packaging a decoder (attndeploy.serving.packaging.generate_model), no server: `package`
writes `<name>_generate` alone, decoupled, with the caps from the options; its shipped copies
cover every attndeploy module the served loop imports; check-repo refuses a drifted copy or a
hand-edited model.py, and a coupled config."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from attndeploy.errors import RepositoryError
from attndeploy.export.decoder import export_decoder
from attndeploy.generation.tokenizer import LMTokenizer
from attndeploy.serving.packaging import model_config as cfgmod
from attndeploy.serving.packaging.check_repo import check_repository
from attndeploy.serving.packaging.generate_model import (
    GENERATE_MODULES,
    PARAM_MAX_PROMPT_TOKENS,
    PARAM_MAX_RUNNING,
    PARAM_MAX_TOKENS,
    generate_sources,
)
from attndeploy.serving.packaging.repository import PackageOptions, package_model
from tests.generation.cases import tiny_model

TOKENIZER = LMTokenizer.build(["the cat sat on the mat"])


@pytest.fixture(scope="module")
def decoder(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("decoder") / "lm.onnx"
    export_decoder(tiny_model("standard", vocab=len(TOKENIZER)), TOKENIZER, path)
    return path


def _config(folder: Path):
    return cfgmod.parse_config((folder / cfgmod.CONFIG_FILE).read_text())


def test_a_decoder_is_packaged_as_one_decoupled_generate_model(decoder, tmp_path):
    [written] = package_model(decoder, tmp_path / "repo",
                              PackageOptions(max_batch_size=4, max_new_tokens=20, max_seq=10))
    assert written.name == "lm_generate" and written.to_dict()["kind"] == "generate"
    assert sorted(p.name for p in (tmp_path / "repo").iterdir()) == ["lm_generate"]
    cfg = _config(written.path)
    assert cfg.model_transaction_policy.decoupled and cfg.max_batch_size == 0
    params = {k: v.string_value for k, v in cfg.parameters.items()}
    assert (params[PARAM_MAX_RUNNING], params[PARAM_MAX_TOKENS],
            params[PARAM_MAX_PROMPT_TOKENS]) == ("4", "20", "10")
    assert [i.name for i in cfg.input if not i.optional] == ["text_input"]
    assert (written.path / "1" / "model.onnx").read_bytes() == decoder.read_bytes()
    assert check_repository(tmp_path / "repo").passed


def test_caps_beyond_the_model_are_refused_before_any_write(decoder, tmp_path):
    with pytest.raises(RepositoryError, match="max_new_tokens 40 must be in 1..31"):
        package_model(decoder, tmp_path / "repo", PackageOptions(max_new_tokens=40))
    assert not (tmp_path / "repo" / "lm_generate").exists()


def test_the_shipped_copies_hold_every_attndeploy_module_the_loop_imports():
    shipped = {name for name, _ in GENERATE_MODULES}
    for relative, content in generate_sources().items():
        for node in ast.walk(ast.parse(content)):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                    and node.module.startswith("attndeploy"):
                assert node.module in shipped, f"{relative} imports {node.module}"


@pytest.mark.parametrize("damage, message", [
    ("1/attndeploy/generation/batching.py", "differs from this attndeploy's"),
    ("1/model.py", "was edited by hand"),
])
def test_check_repo_refuses_a_drifted_copy(decoder, tmp_path, damage, message):
    [written] = package_model(decoder, tmp_path / "repo", PackageOptions())
    path = written.path / damage
    path.write_text(path.read_text() + "\n# changed\n")
    report = check_repository(tmp_path / "repo")
    assert not report.passed
    assert any(message in f.message for f in report.errors)


def test_check_repo_refuses_a_coupled_generate_model(decoder, tmp_path):
    [written] = package_model(decoder, tmp_path / "repo", PackageOptions())
    config = written.path / cfgmod.CONFIG_FILE
    text = config.read_text()
    config.write_text(text.replace("decoupled: true", "decoupled: false"))
    assert any("must be decoupled" in f.message for f in check_repository(tmp_path / "repo").errors)


def test_deploy_kubernetes_takes_a_repository_with_a_generate_model(decoder, tmp_path, capsys):
    """The manifests of a repository whose model is a decoupled generate model pass the same
    strict schema validation as a text model's and serve it; a pretrained decoder's tokenizer
    (a tokenizer.json record) puts `tokenizers` into the server image."""
    import json

    from attndeploy.cli.app import run

    package_model(decoder, tmp_path / "repo", PackageOptions(max_new_tokens=8))
    assert run(["deploy", "kubernetes", "--repo", str(tmp_path / "repo"), "--out",
                str(tmp_path / "k8s"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["models"] == ["lm_generate"]
    assert "tokenizers" not in (tmp_path / "k8s" / "images" / "server.Dockerfile").read_text()
    config = tmp_path / "repo" / "lm_generate" / "config.pbtxt"  # as a converted model's
    config.write_text(config.read_text().replace('"lm-word"', '"hf-tokenizer"'))
    assert run(["deploy", "kubernetes", "--repo", str(tmp_path / "repo"), "--out",
                str(tmp_path / "k8s-hf"), "--json"]) == 0
    assert "tokenizers~=" in (tmp_path / "k8s-hf" / "images" / "server.Dockerfile").read_text()
