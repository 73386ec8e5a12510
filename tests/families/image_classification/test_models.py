"""The image models (attndeploy.models.vision): every variant in the ViT and the AA-CNN, the
same networks without attention, GA-Net's gates over positions and Evolving Attention's chain
of position maps."""

from __future__ import annotations

import pytest
import torch

from attndeploy.errors import ConfigError
from attndeploy.models.vision.build import build_model
from attndeploy.nn import EvolvingAttention, GatedAttention, QVIAttention, StandardAttention
from attndeploy.variants.registry import variant_specs
from tests.families.image_classification.images import CASE_IDS, CASES, VARIANTS, tiny_config

pytestmark = pytest.mark.usefixtures("torch_defaults")
LAYERS = {"standard": StandardAttention, "qvi": QVIAttention, "ganet": GatedAttention,
          "evolving": EvolvingAttention}


def test_every_registered_variant_has_an_image_case():
    assert sorted(spec.name for spec in variant_specs()) == sorted(VARIANTS)


@pytest.mark.parametrize("architecture, variant", CASES, ids=CASE_IDS)
def test_shapes_outputs_and_the_variant_s_layers(architecture, variant):
    config = tiny_config(architecture, variant)
    model = build_model(config).eval()
    out = model(torch.randn(5, 1, 8, 8))
    assert out["logits"].shape == (5, 3) and torch.isfinite(out["logits"]).all()
    assert set(out) == ({"logits", "gates"} if variant == "ganet" else {"logits"})
    if variant == "ganet":
        assert out["gates"].dtype == torch.bool and out["gates"].shape == (5, config.positions)
    layers = [m for m in model.modules() if isinstance(m, tuple(LAYERS.values()))]
    assert len(layers) == 3 and all(type(layer) is LAYERS[variant] for layer in layers)


@pytest.mark.parametrize("architecture, variant", CASES, ids=CASE_IDS)
def test_images_are_classified_independently_of_their_batch(architecture, variant):
    model = build_model(tiny_config(architecture, variant)).eval()
    images = torch.randn(4, 1, 8, 8)
    with torch.no_grad():
        alone = torch.cat([model(images[i:i + 1])["logits"] for i in range(4)])
        together = model(images)["logits"]
    assert torch.allclose(alone, together, atol=1e-5)


@pytest.mark.parametrize("architecture", ["vit", "aacnn"])
def test_without_attention_the_network_has_no_attention_layer_and_still_learns(architecture):
    config = tiny_config(architecture, attention=False)
    model = build_model(config)
    assert not [m for m in model.modules() if isinstance(m, tuple(LAYERS.values()))]
    out = model(torch.randn(2, 1, 8, 8), details=True)
    out["logits"].sum().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    with pytest.raises(ConfigError, match="no attention variant"):
        tiny_config(architecture, "evolving", attention=False)


@pytest.mark.parametrize("architecture", ["vit", "aacnn"])
def test_evolving_attention_hands_each_layer_the_maps_of_the_one_below(architecture, monkeypatch):
    model = build_model(tiny_config(architecture, "evolving")).eval()
    layers = [m for m in model.modules() if isinstance(m, EvolvingAttention)]
    assert [layer.is_chain_start for layer in layers] == [True, False, False]
    handed: list = []
    for layer in layers:
        original = layer.forward_context

        def spy(x, context, original=original):
            handed.append(context.prev_logits)
            return original(x, context)

        monkeypatch.setattr(layer, "forward_context", spy)
    with torch.no_grad():
        model(torch.randn(2, 1, 8, 8))
    positions = model.config.positions
    assert handed[0] is None
    assert all(maps.shape == (2, 2, positions, positions) for maps in handed[1:])


@pytest.mark.parametrize("architecture", ["vit", "aacnn"])
def test_ganet_trains_with_a_density_penalty_and_closed_positions_change_nothing(architecture):
    config = tiny_config(architecture, "ganet")
    model = build_model(config)
    out = model(torch.randn(3, 1, 8, 8), details=True)
    assert out["density_penalty"].requires_grad and 0 < float(out["density_penalty"].detach()) < 1
    out["density_penalty"].backward()
    assert model.gates.network.score.weight.grad.abs().sum() > 0
    model.eval()
    with torch.no_grad():  # every gate shut but the rescued one: the output is still finite
        model.gates.network.shift_threshold(-100.0)
        gates = model(torch.randn(3, 1, 8, 8))["gates"]
    assert gates.sum(-1).tolist() == [1, 1, 1]


@pytest.mark.parametrize("changes, message", [
    ({"patch_size": 3}, "does not divide by the patch size 3"),
    ({"architecture": "aacnn", "height": 6}, "does not divide by 4"),
    ({"architecture": "aacnn", "d_model": 32}, "must be below its layers' width"),
    ({"variant": "linear"}, "unknown variant 'linear'"),
    ({"architecture": "resnet"}, "unknown image architecture"),
    ({"n_heads": 3}, "divisible by n_heads"),
])
def test_a_config_that_cannot_be_built_is_one_config_error(changes, message):
    with pytest.raises(ConfigError, match=message):
        tiny_config(**changes)


@pytest.mark.parametrize("architecture", ["vit", "aacnn"])
def test_each_architecture_builds_with_only_the_defaults(architecture):
    """`train --data DIR --architecture aacnn` gives no sizes: the ViT's default token width
    (64) is the AA-CNN's whole layer width, so its attention takes half of it instead."""
    from attndeploy.models.vision.config import ImageModelConfig, with_architecture_defaults

    config = ImageModelConfig(num_labels=10, **with_architecture_defaults(
        {"architecture": architecture, "variant": "evolving"}))
    assert config.d_model == (ImageModelConfig.conv_channels if architecture == "aacnn"
                              else ImageModelConfig.d_model)
    assert build_model(config).eval()(torch.zeros(2, 1, 28, 28))["logits"].shape == (2, 10)
    given = with_architecture_defaults({"architecture": "aacnn", "d_model": 16})
    assert given["d_model"] == 16  # a width given is kept
