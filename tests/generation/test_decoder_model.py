"""The causal LM (attndeploy.models.decoder): causal, its cache equals recomputation for every
variant, its config refuses what cannot decode, and its checkpoint reads back the same model."""

from __future__ import annotations

import pytest
import torch

from attndeploy.errors import ConfigError
from attndeploy.generation.tokenizer import LMTokenizer
from attndeploy.models.decoder.checkpoint import load_decoder, save_decoder
from attndeploy.models.decoder.config import DecoderConfig
from attndeploy.validate.decoder import check_incremental
from tests.generation.cases import PARAMS, tiny_model


@pytest.mark.parametrize("name", PARAMS)
def test_incremental_decoding_equals_full_recomputation(name):
    check = check_incremental(tiny_model(name), lengths=(1, 4, 9), steps=5)
    assert check, check.to_dict()
    assert check.max_error <= 1e-5


@pytest.mark.parametrize("name", PARAMS)
def test_logits_up_to_t_ignore_every_later_token(name):
    model = tiny_model(name)
    ids = torch.randint(4, 24, (2, 10), generator=torch.Generator().manual_seed(1))
    changed = ids.clone()
    changed[:, 6:] = (changed[:, 6:] + 5) % 20 + 4
    with torch.no_grad():
        base, _ = model(ids)
        other, _ = model(changed)
    assert torch.equal(base[:, :6], other[:, :6])
    assert not torch.allclose(base[:, 6:], other[:, 6:])


@pytest.mark.parametrize("name", PARAMS)
def test_the_state_specs_name_every_cache_tensor_as_optimum_does(name):
    model = tiny_model(name)
    specs = model.state_specs()
    assert [s.past for s in specs] == list(model.empty_state(1))
    for spec in specs:
        assert spec.past.startswith("past_key_values.")
        assert spec.present == "present." + spec.past[len("past_key_values."):]
        assert spec.dims[0] == "batch"
    names = {s.past.rsplit(".", 1)[-1] for s in specs}
    assert {"key", "value"} <= names
    variant = model.config.variant
    assert ("evolving_rows" in names) == (variant == "evolving")
    assert ("key_mask" in names) == (variant == "ganet")
    assert ("qvi_prefix_max" in names) == (model.config.qvi_form == "prefix" and variant == "qvi")


def test_a_bidirectional_qvi_form_is_refused_with_what_to_choose():
    with pytest.raises(ConfigError, match="leaks future tokens.*'prefix' or 'pairwise'"):
        DecoderConfig(vocab_size=10, variant="qvi", qvi_form="pooled")


def test_the_lstm_gate_network_is_refused_in_a_decoder():
    with pytest.raises(ConfigError, match="mlp, conv"):
        DecoderConfig(vocab_size=10, variant="ganet", ganet_aux="lstm")


def test_a_position_beyond_the_context_is_refused():
    model = tiny_model("standard", max_seq=8)
    with pytest.raises(ConfigError, match="beyond the model's context of 8"):
        model(torch.ones(1, 9, dtype=torch.long))


@pytest.mark.parametrize("tied", [True, False])
def test_a_checkpoint_reads_back_the_same_model(tmp_path, tied):
    model = tiny_model("evolving", tie_embeddings=tied)
    tokenizer = LMTokenizer.build(["a b c"])
    save_decoder(model, tokenizer, tmp_path / "ckpt", metrics={"perplexity": 3.0})
    loaded = load_decoder(tmp_path / "ckpt")
    ids = torch.randint(0, 24, (2, 7))
    with torch.no_grad():
        assert torch.equal(model(ids)[0], loaded.model(ids)[0])
    assert loaded.tokenizer.vocab == tokenizer.vocab
    assert loaded.raw["model"]["head"] == "causal_lm"
    assert (loaded.model.lm_head.weight is loaded.model.token_embedding.weight) == tied


def test_a_checkpoint_whose_weights_changed_is_refused(tmp_path):
    from attndeploy.errors import CheckpointError

    save_decoder(tiny_model("standard"), None, tmp_path / "a")
    save_decoder(tiny_model("standard", seed=1), None, tmp_path / "b")
    (tmp_path / "a" / "model.safetensors").write_bytes(
        (tmp_path / "b" / "model.safetensors").read_bytes())
    with pytest.raises(CheckpointError, match="sha256 differs"):
        load_decoder(tmp_path / "a")


def test_info_on_a_decoder_checkpoint_shows_perplexity_beside_the_n_gram(tmp_path):
    """`attndeploy info` reaches the family's `describe_checkpoint` hook (no branch on its
    head in the command): the held-out perplexity beside the baseline's, in one line."""
    import json

    from typer.testing import CliRunner

    from attndeploy.cli.app import app

    save_decoder(tiny_model("standard"), LMTokenizer.build(["a b c"]), tmp_path / "ckpt",
                 metrics={"perplexity": 3.25, "baseline_perplexity": 4.5,
                          "baseline": "Kneser-Ney trigram"})
    shown = CliRunner().invoke(app, ["info", str(tmp_path / "ckpt"), "--json"])
    assert shown.exit_code == 0, shown.output
    summary = json.loads(shown.output)
    assert summary["family"] == "text-generation"
    assert summary["perplexity (model / Kneser-Ney trigram)"] == "3.25 / 4.5"
