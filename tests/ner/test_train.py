"""`train --data FILE --head crf|softmax` on a character-level BMES file: entity F1 beside the
gazetteer's, the CRF stored in the checkpoint, the character rule in its tokenizer record."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from attndeploy.checkpoint import read_checkpoint
from attndeploy.cli.app import app
from attndeploy.config import ModelConfig
from attndeploy.errors import ConfigError
from attndeploy.families.token_classification.training import CRFTagger

pytestmark = pytest.mark.usefixtures("torch_defaults")
runner = CliRunner()


def _train(bmes_file, out, *extra: str) -> dict:
    result = runner.invoke(app, ["train", "--data", str(bmes_file), "--steps", "60", "--d-model",
                                 "32", "--out", str(out), "--json", *extra],
                           catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("head", ["crf", "softmax"])
def test_a_tagger_learns_the_toy_entities_and_reports_f1_beside_the_gazetteer(
        bmes_file, tmp_path, head) -> None:
    report = _train(bmes_file, tmp_path / head, "--head", head)
    metrics = report["metrics"]
    assert metrics["f1"] > 0.9
    assert metrics["baseline"] == "gazetteer" and "baseline_f1" in metrics
    assert {"precision", "recall", "accuracy"} <= set(metrics)
    checkpoint = read_checkpoint(tmp_path / head)
    assert checkpoint.tokenizer.to_dict()["type"] == "char"
    assert isinstance(checkpoint.model.head, CRFTagger) == (head == "crf")
    raw = json.loads((tmp_path / head / "config.json").read_text())
    assert raw["model"].get("tag_head", "softmax") == head
    # a CRF trained from the CLI decodes only the sequences BMES allows, saved and reloaded
    assert raw["model"].get("crf_constraints", "none") == ("scheme" if head == "crf" else "none")
    if head == "crf":
        assert checkpoint.model.head.crf.is_constrained


def test_a_crf_constraint_needs_a_crf_and_old_configs_read_as_unconstrained() -> None:
    from attndeploy.models import build_model

    crf = ModelConfig(vocab_size=5, num_labels=3, head="tagging", tag_head="crf")
    assert "crf_constraints" not in crf.to_dict()  # as written before the field existed
    constrained = ModelConfig(vocab_size=5, num_labels=3, head="tagging", tag_head="crf",
                              crf_constraints="scheme")
    assert ModelConfig.from_dict(constrained.to_dict()) == constrained
    names = ("O", "B-X", "E-X")
    assert build_model(constrained, names).head.crf.is_constrained
    assert not build_model(crf, names).head.crf.is_constrained
    with pytest.raises(ConfigError, match="needs tag_head 'crf'"):
        ModelConfig(vocab_size=5, num_labels=3, head="tagging", crf_constraints="scheme")
    with pytest.raises(ConfigError, match="CRF constraint"):
        ModelConfig(vocab_size=5, num_labels=3, head="tagging", tag_head="crf",
                    crf_constraints="bio")


def test_a_softmax_config_is_written_as_before_and_a_crf_needs_the_tagging_head() -> None:
    assert "tag_head" not in ModelConfig(vocab_size=5, num_labels=2).to_dict()
    crf = ModelConfig(vocab_size=5, num_labels=3, head="tagging", tag_head="crf")
    assert ModelConfig.from_dict(crf.to_dict()) == crf
    with pytest.raises(ConfigError, match="needs the tagging head"):
        ModelConfig(vocab_size=5, num_labels=2, tag_head="crf")
    with pytest.raises(ConfigError, match="unknown tag head"):
        ModelConfig(vocab_size=5, num_labels=2, head="tagging", tag_head="hmm")
    assert "char_cnn" not in ModelConfig(vocab_size=5, num_labels=2).to_dict()
    with pytest.raises(ConfigError, match="odd kernel width"):
        ModelConfig(vocab_size=5, num_labels=2, char_cnn=4)


def test_a_char_cnn_is_stored_and_its_padding_never_reaches_real_tokens() -> None:
    import torch

    from attndeploy.models import build_model

    config = ModelConfig(vocab_size=9, num_labels=3, head="tagging", tag_head="crf", d_model=8,
                         n_heads=2, char_cnn=3)
    model = build_model(config).eval()
    assert model.cnn is not None and ModelConfig.from_dict(config.to_dict()) == config
    ids = torch.tensor([[2, 3, 4, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 0, 0]])
    with torch.no_grad():
        padded = model(ids, mask)["logits"][:, :3]
        alone = model(ids[:, :3], mask[:, :3])["logits"]
    torch.testing.assert_close(padded, alone)
