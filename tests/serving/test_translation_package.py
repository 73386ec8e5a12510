"""Packaging a translation export as `<name>_generate` (no server): the folder's two graphs and
the encoder-decoder's shipped modules beside model.py, a `num_beams` input, caps from the
model's source and target lengths; check-repo passes it and refuses a drifted copy; an export
made before the target mask, a cap beyond the model and a translation checkpoint are refused."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import onnx
import pytest

from attndeploy.errors import RepositoryError
from attndeploy.serving.packaging import model_config as cfgmod
from attndeploy.serving.packaging.check_repo import check_repository
from attndeploy.serving.packaging.generate_model import (
    FAMILY_TRANSLATION,
    PARAM_GENERATE,
    PARAM_MAX_PROMPT_TOKENS,
    PARAM_MAX_TOKENS,
    generate_sources,
    shipped_modules,
)
from attndeploy.serving.packaging.repository import PackageOptions, package_model


def test_the_shipped_copies_hold_every_attndeploy_module_a_translation_model_imports():
    shipped = {name for name, _ in shipped_modules(FAMILY_TRANSLATION)}
    assert "attndeploy.generation.seq2seq_serve" in shipped
    for relative, content in generate_sources(FAMILY_TRANSLATION).items():
        for node in ast.walk(ast.parse(content)):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                    and node.module.startswith("attndeploy"):
                assert node.module in shipped, f"{relative} imports {node.module}"


def test_a_translation_checkpoint_is_refused_with_the_command_that_exports_it(tmp_path):
    checkpoint = tmp_path / "mt"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text(json.dumps({"model": {"head": "translation"}}))
    with pytest.raises(RepositoryError, match="export it first"):
        package_model(checkpoint, tmp_path / "repo", PackageOptions())
    assert not (tmp_path / "repo").exists() or not any((tmp_path / "repo").iterdir())


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> Path:
    from attndeploy.export.seq2seq import export_seq2seq
    from attndeploy.models.seq2seq.tokenizer import train_bpe
    from tests.models.seq2seq.cases import tiny_model

    tokenizer = train_bpe(["der Hund sieht das Haus", "the dog sees the house"] * 3, 40)
    folder = tmp_path_factory.mktemp("mt") / "mt"
    export_seq2seq(tiny_model("evolving", vocab=len(tokenizer)), tokenizer, folder)
    return folder


def _config(folder: Path):
    return cfgmod.parse_config((folder / cfgmod.CONFIG_FILE).read_text())


@pytest.mark.slow  # one export of two graphs
def test_a_translation_export_is_one_generate_model_that_check_repo_passes(export, tmp_path):
    [written] = package_model(export, tmp_path / "repo", PackageOptions(max_batch_size=4))
    assert written.name == "mt_generate" and written.to_dict()["kind"] == "generate"
    cfg = _config(written.path)
    params = {k: v.string_value for k, v in cfg.parameters.items()}
    assert params[PARAM_GENERATE] == FAMILY_TRANSLATION
    assert (params[PARAM_MAX_PROMPT_TOKENS], params[PARAM_MAX_TOKENS]) == ("16", "16")
    assert cfg.model_transaction_policy.decoupled
    assert "num_beams" in [i.name for i in cfg.input if i.optional]
    for graph in ("encoder_model.onnx", "decoder_model.onnx"):
        assert (written.path / "1" / graph).read_bytes() == (export / graph).read_bytes()
    assert (written.path / "1" / "attndeploy/generation/seq2seq_serve.py").is_file()
    assert check_repository(tmp_path / "repo").passed
    copy = written.path / "1" / "attndeploy/generation/seq2seq_serve.py"
    copy.write_text(copy.read_text() + "\n# changed\n")
    report = check_repository(tmp_path / "repo")
    assert any("differs from this attndeploy's" in f.message for f in report.errors)


@pytest.mark.slow
def test_caps_beyond_the_model_and_an_export_without_the_target_mask_are_refused(export,
                                                                                 tmp_path):
    with pytest.raises(RepositoryError, match="max_new_tokens 17 must be in 1..16"):
        package_model(export, tmp_path / "repo", PackageOptions(max_new_tokens=17))
    old = tmp_path / "old"
    old.mkdir()
    (old / "encoder_model.onnx").write_bytes((export / "encoder_model.onnx").read_bytes())
    decoder = onnx.load(str(export / "decoder_model.onnx"))
    kept = [i for i in decoder.graph.input if i.name != "decoder_attention_mask"]
    del decoder.graph.input[:]
    decoder.graph.input.extend(kept)
    onnx.save(decoder, str(old / "decoder_model.onnx"))
    with pytest.raises(RepositoryError, match="re-export"):
        package_model(old, tmp_path / "repo", PackageOptions())
    assert not (tmp_path / "repo" / "old_generate").exists()
