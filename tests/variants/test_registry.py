"""The variant registry, op dispatch and config validation (style.md: a registry, not ladders)."""

from __future__ import annotations

import pytest
import torch

from attndeploy.config import EvolvingConfig, GANetConfig, ModelConfig, QVIConfig
from attndeploy.errors import ConfigError
from attndeploy.variants import dispatch, get_variant, registered_variants, variant_names
from attndeploy.variants import functional as Fn
from attndeploy.variants._common import AttentionBase
from attndeploy.variants.registry import VARIANT_NAMES, register_variant
from tests.helpers import lengths_mask, qkv

pytestmark = pytest.mark.usefixtures("torch_defaults")


def test_every_declared_variant_is_registered_as_an_attention_layer():
    registry = registered_variants()
    assert tuple(registry) == VARIANT_NAMES or set(registry) == set(VARIANT_NAMES)
    assert variant_names() == VARIANT_NAMES
    for name, cls in registry.items():
        assert issubclass(cls, AttentionBase), name
        assert get_variant(name) is cls


def test_unknown_variant_fails_listing_the_valid_names():
    with pytest.raises(ConfigError) as err:
        get_variant("flash")
    assert "'flash'" in str(err.value)
    assert all(name in str(err.value) for name in VARIANT_NAMES)


def test_registering_a_name_twice_is_refused_and_leaves_the_registry_intact():
    before = registered_variants()
    with pytest.raises(ConfigError, match="registered twice"):
        register_variant("standard")(type("Impostor", (AttentionBase,), {}))
    assert registered_variants() == before


def test_registering_an_undeclared_name_is_refused():
    with pytest.raises(ConfigError, match="not declared"):
        register_variant("mystery")(type("Mystery", (AttentionBase,), {}))
    assert "mystery" not in registered_variants()


def test_dispatch_runs_the_functional_reference_by_default():
    q, k, v = qkv(1, 2, 3, 4)
    mask = lengths_mask([3])
    out, logits = dispatch.call("evolving_attention_start", q, k, v, mask)
    ref_out, ref_logits = Fn.evolving_attention_start(q, k, v, mask)
    assert torch.equal(out, ref_out) and torch.equal(logits, ref_logits)


def test_override_ops_swaps_an_op_and_restores_it_even_after_an_error():
    calls = []

    def fake(*args, **kwargs):
        calls.append(kwargs)
        return "fake"

    with pytest.raises(RuntimeError), dispatch.override_ops({"gated_attention": fake}):
        assert dispatch.call("gated_attention", scale=0.5) == "fake"
        raise RuntimeError("boom")
    assert calls == [{"scale": 0.5}]
    q, k, v = qkv(1, 1, 2, 2)
    out, _ = dispatch.call("gated_attention", q, k, v, lengths_mask([2]), torch.ones(1, 2))
    assert isinstance(out, torch.Tensor)


def test_override_ops_rejects_unknown_op_names():
    with pytest.raises(KeyError, match="not_an_op"), dispatch.override_ops({"not_an_op": print}):
        pass


# ----------------------------------------------------------------------------- config


BASE = {"vocab_size": 20, "num_labels": 2}


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"variant": "flash"}, "valid: standard, qvi, ganet, evolving"),
        ({"d_model": 30, "n_heads": 4}, "divisible by n_heads"),
        ({"num_labels": 1}, "num_labels must be >= 2"),
        ({"dropout": 1.0}, "dropout"),
        ({"family": "bilstm", "variant": "qvi"}, "bilstm family supports"),
        ({"family": "bilstm", "variant": "ganet"}, "set ganet aux to 'bilstm'"),
        ({"family": "bilstm", "head": "tagging"}, "classification head only"),
        ({"head": "regression"}, "unknown head"),
        ({"d_model": 64.0}, "d_model must be of type int"),
        ({"n_layers": True}, "n_layers must be of type int"),
    ],
)
def test_model_config_errors_say_what_to_change(changes, message):
    with pytest.raises(ConfigError, match=message):
        ModelConfig(**{**BASE, **changes})


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: QVIConfig(form="dense"), "valid: pooled, pairwise"),
        (lambda: QVIConfig(pairwise_chunk=0), "pairwise_chunk must be > 0"),
        (lambda: GANetConfig(aux="gru"), "valid: mlp, conv, bilstm"),
        (lambda: GANetConfig(temperature=0.0), "temperature must be > 0"),
        (lambda: GANetConfig(temperature=-1.0), "temperature must be > 0"),
        (lambda: GANetConfig(density_weight=-1e-3), "density_weight must be >= 0"),
        (lambda: GANetConfig(gate_mode="argmax"), "valid: threshold, sample"),
        (lambda: EvolvingConfig(alpha=1.5), r"alpha must lie in \[0, 1\]"),
        (lambda: EvolvingConfig(beta=-0.1), r"beta must lie in \[0, 1\]"),
        (lambda: EvolvingConfig(negative_slope=-0.1), "negative_slope must be >= 0"),
    ],
)
def test_variant_config_errors_say_what_to_change(build, message):
    with pytest.raises(ConfigError, match=message):
        build()


def test_model_config_round_trips_through_a_dict():
    config = ModelConfig(**BASE, variant="ganet", ganet=GANetConfig(aux="conv", temperature=1.5),
                         evolving=EvolvingConfig(alpha=0.3))
    assert ModelConfig.from_dict(config.to_dict()) == config


@pytest.mark.parametrize(
    "raw, message",
    [
        ({**BASE, "colour": "red"}, "unknown model config keys: colour"),
        ({"vocab_size": 20}, "incomplete"),
        ({**BASE, "qvi": {"form": "pooled", "size": 3}}, "unknown qvi config keys: size"),
        ({**BASE, "ganet": ["mlp"]}, "'ganet' must be a JSON object"),
        ({**BASE, "ganet": {"temperature": "hot"}}, "temperature must be of type float"),
        ({**BASE, "evolving": {"alpha": None}}, "alpha must be of type float"),
        ([1, 2], "must be a JSON object"),
    ],
)
def test_model_config_from_a_corrupt_dict_raises_config_error(raw, message):
    with pytest.raises(ConfigError, match=message):
        ModelConfig.from_dict(raw)
