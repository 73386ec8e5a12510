"""`convert` swaps BERT-family self-attention for a variant in place, keeping the model's weights,
forward signature and outputs (models built from small configs; nothing is downloaded)."""

from __future__ import annotations

import copy
import dataclasses
import inspect

import pytest
import torch

pytest.importorskip("transformers")

from attndeploy.errors import ConfigError  # noqa: E402
from attndeploy.integrations.transformers import (  # noqa: E402
    ConvertedSelfAttention,
    conversion_of,
    convert,
    forward_state,
    layer_modules,
)
from attndeploy.integrations.warm_start import set_warm_start_progress  # noqa: E402
from attndeploy.variants.functional import hard_gates  # noqa: E402

from .hf_models import MODEL_TYPES, VARIANTS, make_model, padded_batch  # noqa: E402

KINDS = ("base", "seq", "tok", "mlm", "qa")


def run(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask)


def assert_same_outputs(got, want, atol: float = 1e-5) -> None:
    assert type(got) is type(want)
    assert list(got.keys()) == list(want.keys())
    for key in want.keys():
        torch.testing.assert_close(got[key], want[key], atol=atol, rtol=1e-5, msg=key)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_standard_conversion_keeps_weights_signature_and_outputs(model_type: str, kind: str):
    original = make_model(model_type, kind)
    converted = convert(copy.deepcopy(original), "standard")
    ids, mask = padded_batch(3, 9)
    assert inspect.signature(converted.forward) == inspect.signature(original.forward)
    assert_same_outputs(run(converted, ids, mask), run(original, ids, mask))
    layers = [m for m in converted.modules() if isinstance(m, ConvertedSelfAttention)]
    assert len(layers) == 2


def _open_every_gate(model: torch.nn.Module) -> None:
    network = conversion_of(model).gate_network
    with torch.no_grad():
        network.score.weight.zero_()
        network.score.bias.fill_(50.0)  # s = 50 > 0 everywhere: every real key open


def _qvi_gamma_one(model: torch.nn.Module) -> None:
    for layer in model.modules():
        if isinstance(layer, ConvertedSelfAttention):
            with torch.no_grad():  # Γ = σ(50) = 1.0 in fp32: values are the model's own V
                layer.attention.gate_v_weight.zero_()
                layer.attention.gate_qv_weight.zero_()
                layer.attention.gate_bias.fill_(50.0)


REDUCTIONS = {  # variant settings that make it vanilla attention (docs/variants.md §6: E1, Q1, G1)
    "evolving": ({"alpha": 0.0, "beta": 0.0}, None),
    "qvi": ({}, _qvi_gamma_one),
    "ganet": ({}, _open_every_gate),
}


@pytest.mark.parametrize("variant", sorted(REDUCTIONS))
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_a_variant_reduced_to_vanilla_reproduces_the_original_pretrained_model(
    model_type: str, variant: str
):
    """The projections are the model's own: with its extra parts neutral, a converted model
    computes exactly what it computed before (so a pretrained model starts from its weights)."""
    original = make_model(model_type, "seq", layers=3)
    options, neutralise = REDUCTIONS[variant]
    converted = convert(copy.deepcopy(original), variant, **options)
    if neutralise is not None:
        neutralise(converted)
    ids, mask = padded_batch(4, 11)
    assert_same_outputs(run(converted, ids, mask), run(original, ids, mask))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_right_padding_leaves_the_logits_of_real_tokens_unchanged(model_type: str, variant: str):
    model = convert(make_model(model_type, "tok", layers=3), variant)
    ids, mask = padded_batch(3, 7)
    short = run(model, ids, mask).logits  # [B, T, C]
    padded_ids = torch.cat([ids, torch.zeros(3, 5, dtype=ids.dtype)], 1)
    padded_mask = torch.cat([mask, torch.zeros(3, 5, dtype=mask.dtype)], 1)
    long = run(model, padded_ids, padded_mask).logits
    real = mask.bool()
    torch.testing.assert_close(long[:, :7][real], short[real], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_ganet_scores_the_token_embeddings_once_and_every_layer_applies_those_gates(
    model_type: str,
):
    model = convert(make_model(model_type, "seq", layers=3), "ganet")
    ids, mask = padded_batch(3, 9)
    applied = []
    for layer in model.modules():
        if isinstance(layer, ConvertedSelfAttention):
            layer.attention.register_forward_hook(lambda m, a, out: applied.append(out[1]))
    run(model, ids, mask)
    state = forward_state(model)
    tokens = model.base_model.embeddings.word_embeddings(ids)
    scores = conversion_of(model).gate_network.scores(tokens, mask.bool())
    torch.testing.assert_close(state.gate_logits, scores)
    expected = hard_gates(scores, mask.bool())
    assert len(applied) == 3
    for gates in applied:
        assert torch.equal(gates, expected)
    assert torch.equal(state.gates, expected)
    assert not (state.gates & ~mask.bool()).any()  # pads are never open


def test_ganet_scores_given_input_embeddings_like_token_ids():
    model = convert(make_model("bert", "seq"), "ganet")
    ids, mask = padded_batch(2, 6)
    by_ids = run(model, ids, mask).logits
    gates = forward_state(model).gates.clone()
    embeds = model.bert.embeddings.word_embeddings(ids).detach()
    with torch.no_grad():
        by_embeds = model(inputs_embeds=embeds, attention_mask=mask).logits
    torch.testing.assert_close(by_embeds, by_ids)
    assert torch.equal(forward_state(model).gates, gates)


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_evolving_chain_starts_at_layer_zero_and_continues_through_the_stack(model_type: str):
    model = convert(make_model(model_type, "seq", layers=3), "evolving", alpha=0.3, beta=0.5)
    layers = [m.attention for m in model.modules() if isinstance(m, ConvertedSelfAttention)]
    assert [layer.is_chain_start for layer in layers] == [True, False, False]
    assert not hasattr(layers[0], "conv")
    assert all(layer.conv.weight.shape == (4, 4, 3, 3) for layer in layers[1:])
    assert all((layer.alpha, layer.beta) == (0.3, 0.5) for layer in layers)
    handed = []
    for layer in layers:
        layer.register_forward_hook(lambda m, args, out: handed.append((args, out)))
    ids, mask = padded_batch(2, 6)
    run(model, ids, mask)
    assert handed[0][0][2] is None  # layer 0 starts the chain
    for (args, _), (_, previous) in zip(handed[1:], handed[:-1], strict=True):
        assert args[2] is previous[1]  # layer l reads the logits layer l-1 handed on


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_evolving_upper_half_starts_the_chain_anew_below_and_mixes_above(model_type: str):
    """`evolving_layers="upper_half"`: the lower half are chain starts (vanilla attention, no
    conv) and compute what the pretrained layers computed once the variant is fully in; the
    first mixing layer reads the logits of the layer just below it."""
    original = make_model(model_type, "seq", layers=4)
    model = convert(copy.deepcopy(original), "evolving", alpha=0.3, beta=0.5,
                    evolving_layers="upper_half")
    layers = [m.attention for m in layer_modules(model)]
    assert [layer.is_chain_start for layer in layers] == [True, True, False, False]
    assert not any(hasattr(layer, "conv") for layer in layers[:2])
    assert conversion_of(model).options["evolving_layers"] == "upper_half"
    assert conversion_of(model).expected_nodes() == {"EvolvingAttentionStart": 2,
                                                     "EvolvingAttention": 2}
    handed = []
    for layer in layers:
        layer.register_forward_hook(lambda m, args, out: handed.append((args, out)))
    ids, mask = padded_batch(2, 8)
    set_warm_start_progress(model, 1.0)  # α 0.3, β 0.5 in every mixing layer
    with torch.no_grad():
        for layer in layers[2:]:  # a conv that sharpens the small random model's flat maps
            layer.conv.weight.normal_(0.0, 5.0, generator=torch.Generator().manual_seed(0))
        want = original(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        got = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    assert handed[0][0][2] is None and handed[1][0][2] is None  # each lower layer starts anew
    assert handed[2][0][2] is handed[1][1][1]  # layer 2 mixes in layer 1's logits
    assert handed[3][0][2] is handed[2][1][1]
    real = mask.bool()
    for layer in (1, 2):  # hidden_states[l] is layer l-1's output: vanilla below
        torch.testing.assert_close(got.hidden_states[layer][real],
                                   want.hidden_states[layer][real], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(got.hidden_states[3][real], want.hidden_states[3][real], atol=1e-4)


@pytest.mark.parametrize(("evolving_layers", "layers", "starts"), [
    ("all", 6, 1), ("upper_half", 6, 3), ("upper_half", 1, 1), ("upper_third", 6, 4),
    ("upper_third", 12, 8), ("upper_third", 2, 1), ("all", 1, 1)])
def test_evolving_layers_names_how_many_lower_layers_start_the_chain(
        evolving_layers: str, layers: int, starts: int):
    from attndeploy.variants.evolving.config import EvolvingConfig

    assert EvolvingConfig(evolving_layers=evolving_layers).chain_starts(layers) == starts


WARM_OPTIONS = {"evolving": {"alpha": 0.3, "beta": 0.5, "evolving_layers": "upper_half"},
                "qvi": {}, "ganet": {"gated_layers": "upper_third"}, "standard": {}}


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_a_warm_started_conversion_computes_what_the_model_computed(model_type: str,
                                                                    variant: str):
    """docs/variants.md §7: converting a (pretrained) model starts at its function, in eval
    mode within 1e-5, padded batches included; training then moves it into the variant."""
    original = make_model(model_type, "seq", layers=3)
    converted = convert(copy.deepcopy(original), variant, **WARM_OPTIONS[variant])
    assert conversion_of(converted).warm_start
    ids, mask = padded_batch(4, 11)
    assert_same_outputs(run(converted, ids, mask), run(original, ids, mask))
    if variant == "ganet":
        assert forward_state(converted).gates[mask.bool()].all()  # every real key open


def test_evolving_mixing_weights_come_in_with_the_warm_start_progress():
    original = make_model("bert", "seq", layers=3)
    model = convert(copy.deepcopy(original), "evolving", alpha=0.3, beta=0.5)
    layers = [m.attention for m in model.modules() if isinstance(m, ConvertedSelfAttention)]
    ids, mask = padded_batch(2, 6)
    set_warm_start_progress(model, 0.5)
    assert [(l.alpha_in_use, l.beta_in_use) for l in layers] == [(0.15, 0.25)] * 3
    halfway = run(model, ids, mask).logits
    set_warm_start_progress(model, 1.0)
    assert [(l.alpha_in_use, l.beta_in_use) for l in layers] == [(0.3, 0.5)] * 3
    assert conversion_of(model).warm_start_progress == 1.0
    full = run(model, ids, mask).logits
    before = run(original, ids, mask).logits
    assert not torch.allclose(halfway, before) and not torch.allclose(full, halfway)
    cold = convert(copy.deepcopy(original), "evolving", warm_start=False, alpha=0.3, beta=0.5)
    assert not conversion_of(cold).warm_start
    assert all(m.attention.mix == 1.0 for m in cold.modules()
               if isinstance(m, ConvertedSelfAttention))


def test_a_warm_started_variant_learns_from_the_first_step():
    """Warm starts keep the variant trainable: QVI's maps and GA-Net's gate layer get gradients
    at step 0; Evolving Attention's conv once its mixing weights come in."""
    for variant, names in (("qvi", ("q_map_weight", "v_map_weight")),
                           ("ganet", ("gate_network.score.weight",)),
                           ("evolving", ("conv.weight",))):
        model = convert(make_model("bert", "seq"), variant).train()
        if variant == "evolving":
            set_warm_start_progress(model, 0.1)
        ids, mask = padded_batch(2, 6)
        model(input_ids=ids, attention_mask=mask, labels=torch.tensor([0, 1])).loss.backward()
        grads = {n: p.grad for n, p in model.named_parameters() if n.endswith(names)}
        assert grads and all(g is not None and g.abs().sum() > 0 for g in grads.values()), variant


def test_training_reaches_the_variant_parameters():
    for variant, names in (("evolving", ("conv.weight",)), ("qvi", ("gate_bias",)),
                           ("ganet", ("gate_network.score.weight",))):
        model = convert(make_model("bert", "seq"), variant, warm_start=False).train()
        ids, mask = padded_batch(2, 6)
        model(input_ids=ids, attention_mask=mask, labels=torch.tensor([0, 1])).loss.backward()
        grads = {n: p.grad for n, p in model.named_parameters() if n.endswith(names)}
        assert grads and all(g is not None and g.abs().sum() > 0 for g in grads.values()), variant


# ----------------------------------------------------------------------------- refusals


def test_an_unsupported_class_gets_one_line_naming_the_supported_classes():
    import transformers

    model = transformers.GPT2Model(transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2))
    with pytest.raises(ConfigError) as raised:
        convert(model, "evolving")
    message = str(raised.value)
    assert "\n" not in message
    assert "GPT2Model" in message
    for name in ("BertModel", "BertForSequenceClassification", "RobertaForMaskedLM",
                 "DistilBertForTokenClassification"):
        assert name in message


@pytest.mark.parametrize(
    ("model", "variant", "options", "match"),
    [
        (lambda: make_model("bert", "seq"), "evolving", {"gamma": 1.0},
         "unknown evolving option.*gamma.*alpha, beta, negative_slope"),
        (lambda: make_model("bert", "seq"), "standard", {"alpha": 1.0}, "takes no options"),
        (lambda: make_model("bert", "seq"), "ganet", {"gate_mode": "sample"}, "threshold"),
        (lambda: make_model("bert", "seq"), "nonsense", {}, "unknown variant"),
        (lambda: make_model("bert", "base", is_decoder=True), "qvi", {}, "decoder"),
        (lambda: convert(make_model("bert", "seq"), "qvi"), "qvi", {}, "already converted"),
    ],
    ids=["unknown-option", "options-to-standard", "sampled-gates", "unknown-variant",
         "decoder", "twice"],
)
def test_convert_refuses_what_it_cannot_do(model, variant, options, match):
    with pytest.raises(ConfigError, match=match):
        convert(model(), variant, **options)


def test_a_4d_attention_mask_is_refused():
    model = convert(make_model("bert", "seq"), "evolving")
    ids, _ = padded_batch(2, 5)
    with pytest.raises(ConfigError, match="2-D attention_mask"):
        model(input_ids=ids, attention_mask=torch.zeros(2, 1, 5, 5))


def test_gradient_checkpointing_is_refused_for_the_evolving_chain():
    model = convert(make_model("bert", "seq"), "evolving")
    model.activation_checkpointing_enable()
    model.train()
    ids, mask = padded_batch(2, 5)
    with pytest.raises(ConfigError, match="gradient checkpointing"):
        model(input_ids=ids, attention_mask=mask)


def test_a_converted_layer_runs_only_inside_its_model():
    model = convert(make_model("bert", "seq"), "qvi")
    layer = model.bert.encoder.layer[0].attention.self
    with pytest.raises(ConfigError, match="inside its model's forward"):
        layer(torch.zeros(1, 3, 32))


def test_open_token_ids_keep_their_gates_open_in_training_and_at_eval():
    """A converted BERT's heads park attention on [CLS] and [SEP]; GA-Net's `open_token_ids`
    keep those keys open whatever the gate network says (it closed [SEP] in every layer)."""
    model = convert(make_model("bert", "seq"), "ganet", open_token_ids=(1, 2))
    with torch.no_grad():  # the gate network closes every key
        conversion_of(model).gate_network.score.bias.fill_(-50.0)
    ids, mask = padded_batch(3, 8)
    ids[:, 0], ids[:, 3] = 1, 2  # every row holds both kept ids
    for training in (False, True):
        model.train(training)
        with torch.no_grad():
            model(input_ids=ids, attention_mask=mask)
        gates = forward_state(model).gates
        kept = ((ids == 1) | (ids == 2)) & mask.bool()
        assert gates[kept].all()
        if not training:  # the rest stays closed (no rescue needed: a row has open keys)
            assert not gates[mask.bool() & ~kept].any()
    assert conversion_of(model).options["open_token_ids"] == (1, 2)


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_upper_half_gating_leaves_the_lower_half_attending_every_key(model_type: str):
    """`gated_layers="upper_half"`: the lower half of the layers compute what the pretrained
    layers computed whatever the gates say, the upper half attends the open keys only."""
    original = make_model(model_type, "seq", layers=4)
    upper = convert(copy.deepcopy(original), "ganet", gated_layers="upper_half")
    every = convert(copy.deepcopy(original), "ganet")
    ids, mask = padded_batch(2, 8)
    hold = torch.zeros_like(mask, dtype=torch.bool)  # [B, T]
    hold[:, ::2] = True  # the gates keep every other key
    logits = torch.where(hold, 5.0, -5.0)  # [B, T]
    for model in (upper, every):  # the gate network's logits: +5 at kept keys, -5 elsewhere
        conversion_of(model).gate_network.register_forward_hook(
            lambda m, a, out: dataclasses.replace(out, gate_logits=logits, raw_logits=logits))
    with torch.no_grad():
        want = original(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        got = upper(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        gated = every(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    assert [m.open_gates for m in layer_modules(upper)] == [True, True, False, False]
    assert not any(m.open_gates for m in layer_modules(every))
    real = mask.bool()
    for layer in (1, 2):  # hidden_states[l] is layer l-1's output
        torch.testing.assert_close(got.hidden_states[layer][real],
                                   want.hidden_states[layer][real], atol=1e-5, rtol=1e-5)
        assert not torch.allclose(gated.hidden_states[layer][real],
                                  want.hidden_states[layer][real], atol=1e-3)
    assert not torch.allclose(got.hidden_states[3][real], want.hidden_states[3][real], atol=1e-3)
    gates = forward_state(upper).gates  # what the gated (top) layers applied
    assert torch.equal(gates, hold & real)
    assert conversion_of(upper).options["gated_layers"] == "upper_half"


@pytest.mark.parametrize(("gated_layers", "layers", "open_below"), [
    ("all", 6, 0), ("upper_half", 6, 3), ("upper_half", 1, 0), ("upper_third", 6, 4),
    ("upper_third", 12, 8), ("upper_third", 2, 1), ("upper_third", 1, 0)])
def test_gated_layers_names_how_many_lower_layers_attend_every_key(
        gated_layers: str, layers: int, open_below: int):
    from attndeploy.integrations.transformers import open_layers
    from attndeploy.variants.ganet.config import GANetConfig
    from attndeploy.variants.registry import variant_spec

    assert open_layers(variant_spec("ganet"), GANetConfig(gated_layers=gated_layers),
                       layers) == open_below


@pytest.mark.parametrize(("variant", "option"), [
    ("ganet", "gated_layers"), ("evolving", "evolving_layers")])
def test_the_layer_spans_are_a_choice_and_only_for_converted_models(variant: str, option: str):
    with pytest.raises(ConfigError, match=f"unknown {option} 'lower_half'"):
        convert(make_model("bert", "seq"), variant, **{option: "lower_half"})
    from attndeploy.config import ModelConfig
    from attndeploy.models import build_model
    from attndeploy.variants.registry import variant_spec

    sub = variant_spec(variant).config(**{option: "upper_half"})
    config = ModelConfig(vocab_size=40, num_labels=2, variant=variant, **{variant: sub})
    with pytest.raises(ConfigError, match=f"{option}='upper_half' applies to converted Hugging "
                                          "Face models"):
        build_model(config)


def test_open_token_ids_must_be_token_ids():
    with pytest.raises(ConfigError, match="open_token_ids must be token ids"):
        convert(make_model("bert", "seq"), "ganet", open_token_ids=(-1,))
