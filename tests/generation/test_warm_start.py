"""A pretrained decoder's variant, started warm and brought in (attndeploy.models.decoder.
warm_start): every variant computes the pretrained model's function before the first step,
Evolving Attention's row-causal conv starts as the identity of the row itself, and fine-tuning
brings the variant in on its schedule, its added parameters at their own rate, without making
held-out perplexity worse. A tiny decoder trained here stands in for the pretrained model."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from attndeploy.errors import ConfigError
from attndeploy.models.decoder.fit import (
    FitOptions,
    Start,
    _optimizer,
    added_parameters,
    fit_decoder,
)
from attndeploy.models.decoder.model import CausalLM
from attndeploy.models.decoder.warm_start import density_target_at, evolving_mix_at, start_warm
from tests.generation.cases import CASES, PARAMS, tiny_model

TEXTS = ["the cat sees the ball .", "a dog likes the tree .", "the bird finds a ball .",
         "the dog sees a bird .", "a cat likes the ball ."] * 8


def warm_variant(pretrained: CausalLM, name: str) -> CausalLM:
    """`pretrained`'s weights in a decoder of case `name`'s variant, at its warm start (what
    `integrations.hf_decoder.convert_causal_lm` does to a Hugging Face model)."""
    case = {k: v for k, v in CASES[name].items() if k != "variant" and not k.startswith("evolving")}
    config = dataclasses.replace(pretrained.config, **case, variant=CASES[name]["variant"],
                                 evolving_mix=0.0)
    model = CausalLM(config)
    missing, unexpected = model.load_state_dict(pretrained.state_dict(), strict=False)
    assert not unexpected and set(missing) <= added_parameters(model)
    return start_warm(model).eval()


@pytest.mark.parametrize("name", [p for p in PARAMS if not p.id.endswith("-llama")])
def test_every_variant_starts_as_the_pretrained_model(name):
    pretrained = tiny_model("standard", vocab=30)
    ids = torch.randint(0, 30, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected, _ = pretrained(ids)  # [B, T, V]
        got, _ = warm_variant(pretrained, name)(ids)
    assert torch.allclose(got, expected, atol=1e-5)


def test_evolving_s_conv_starts_as_the_identity_of_each_row_itself():
    """With the whole mix in, α = 0, β = 1 and a linear activation, A = conv(A_in): only an
    identity on row i itself (kernel row 2 of the row-causal kernel) leaves the model as it
    was. The bidirectional centre tap would hand row i the map of row i − 1."""
    pretrained = tiny_model("standard", vocab=30)
    ids = torch.randint(0, 30, (2, 9), generator=torch.Generator().manual_seed(2))
    model = warm_variant(pretrained, "evolving")
    for block in model.blocks:
        block.attention.alpha, block.attention.beta = 0.0, 1.0
        block.attention.negative_slope = 1.0
        block.attention.set_warm_start_progress(1.0)
    with torch.no_grad():
        expected, _ = pretrained(ids)
        got, _ = model(ids)
    assert torch.allclose(got, expected, atol=1e-5)


def test_evolving_s_mix_rises_to_its_cap_over_the_ramp_then_stays():
    mixes = [evolving_mix_at(step, 10, 0.1) for step in range(15)]
    assert mixes[0] == pytest.approx(0.01) and mixes[9] == pytest.approx(0.1)
    assert all(a < b for a, b in zip(mixes[:10], mixes[1:10], strict=False))
    assert mixes[10:] == [pytest.approx(0.1)] * 5
    assert evolving_mix_at(0, 0, 0.3) == 0.3  # no ramp: the cap at once


def test_a_density_target_falls_from_every_gate_open_over_the_ramp():
    targets = [density_target_at(step, 4, 0.2) for step in range(6)]
    assert targets == pytest.approx([0.8, 0.6, 0.4, 0.2, 0.2, 0.2])


def test_bring_in_options_are_checked():
    with pytest.raises(ConfigError, match="evolving_mix_cap must be in"):
        FitOptions(evolving_mix_cap=1.5)
    with pytest.raises(ConfigError, match="ramp_steps must be"):
        FitOptions(ramp_steps=-1)
    assert FitOptions(warmup_steps=7).bring_in_steps == 7
    assert FitOptions(warmup_steps=7, ramp_steps=20).bring_in_steps == 20


def test_the_fine_tune_recipe_brings_evolving_in_to_a_tenth_at_its_own_rate():
    from attndeploy.families.text_generation.training import FINE_TUNE

    options = FitOptions(**FINE_TUNE)
    assert options.evolving_mix_cap == 0.1 and options.bring_in_steps == options.warmup_steps
    model = warm_variant(tiny_model("standard", vocab=30), "evolving")
    added = added_parameters(model)
    assert added == {n for n, _ in model.named_parameters() if ".attention.conv." in n}
    optimizer = _optimizer(model, options, Start(model, None, "tiny"))
    scales = [group["scale"] for group in optimizer.param_groups]
    assert scales == [1.0, pytest.approx(FINE_TUNE["new_learning_rate"]
                                         / FINE_TUNE["learning_rate"])]
    assert {id(p) for p in optimizer.param_groups[1]["params"]} == {
        id(p) for n, p in model.named_parameters() if n in added}


@pytest.fixture(scope="module")
def pretrained():
    """A tiny standard decoder trained on TEXTS, with its tokenizer."""
    tiny = {"d_model": 16, "n_heads": 2, "n_layers": 2, "d_ff": 32, "max_seq": 16}
    result = fit_decoder(TEXTS, {"variant": "standard", **tiny},
                         FitOptions(steps=60, batch_size=8, learning_rate=1e-2,
                                    warmup_steps=5))
    return result


def test_a_short_evolving_fine_tune_does_not_raise_held_out_perplexity(pretrained):
    """FINE_TUNE's bring-in on the tiny pretrained decoder: the converted model starts where
    the pretrained one was, and 20 steps of fine-tuning end no worse, with the mix at its
    cap."""
    model = warm_variant(pretrained.model, "evolving")
    options = FitOptions(steps=20, batch_size=8, learning_rate=5e-4, new_learning_rate=5e-2,
                         warmup_steps=5, evolving_mix_cap=0.1)
    result = fit_decoder(TEXTS, {}, options, start=Start(model, pretrained.tokenizer, "tiny"))
    assert result.metrics["perplexity_before"] == pytest.approx(
        pretrained.metrics["perplexity"], rel=1e-4)
    assert result.metrics["perplexity"] <= result.metrics["perplexity_before"]
    assert result.model.config.evolving_mix == pytest.approx(0.1)
    assert result.model.blocks[1].attention.alpha_in_use == pytest.approx(0.1 * 0.5)


def test_a_fine_tune_cut_short_leaves_the_mix_on_its_ramp(pretrained):
    model = warm_variant(pretrained.model, "evolving")
    options = FitOptions(steps=3, batch_size=4, learning_rate=5e-4, warmup_steps=2,
                         ramp_steps=10, evolving_mix_cap=0.5)
    result = fit_decoder(TEXTS, {}, options, start=Start(model, pretrained.tokenizer, "tiny"))
    assert result.model.config.evolving_mix == pytest.approx(0.5 * 3 / 10)


def test_a_fine_tune_may_leave_the_start_s_perplexity_unmeasured(pretrained):
    """`measure_before=False`: a benchmark of several warm starts of one model measures it
    once; the metrics then hold no `perplexity_before` rather than a stale number."""
    model = warm_variant(pretrained.model, "qvi-prefix")
    options = FitOptions(steps=1, batch_size=2, measure_before=False)
    result = fit_decoder(TEXTS, {}, options, start=Start(model, pretrained.tokenizer, "tiny"))
    assert "perplexity_before" not in result.metrics and "perplexity" in result.metrics
