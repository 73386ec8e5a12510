"""The variant registry, op routing and config validation (a registry, not ladders)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
import torch

from attndeploy.config import EvolvingConfig, GANetConfig, ModelConfig, QVIConfig
from attndeploy.errors import ConfigError
from attndeploy.variants import functional as Fn
from attndeploy.variants import (
    get_variant,
    registered_variants,
    variant_names,
    variant_spec,
    variant_specs,
)
from attndeploy.variants.api import AttentionBase, call_op
from attndeploy.variants.registry import VARIANT_NAMES, register_variant
from tests.helpers import lengths_mask, qkv

pytestmark = pytest.mark.usefixtures("torch_defaults")


def test_every_variant_package_registers_one_spec_with_a_layer_for_the_built_in_models():
    registry = registered_variants()
    assert tuple(registry) == VARIANT_NAMES == variant_names()
    assert variant_names() == ("standard", "qvi", "ganet", "evolving")  # the `order`s
    for name, cls in registry.items():
        assert issubclass(cls, AttentionBase), name
        assert get_variant(name) is cls
        assert cls.from_config is not AttentionBase.from_config, name
        assert cls.forward_context is not AttentionBase.forward_context, name


def test_each_spec_is_the_one_source_of_its_config_ops_and_outputs():
    fields = {f.name for f in dataclasses.fields(ModelConfig)}
    for spec in variant_specs():
        if spec.config is not None:  # ModelConfig.<name> is the variant's sub-config
            assert spec.name in fields
            assert isinstance(getattr(ModelConfig(vocab_size=5, num_labels=2), spec.name),
                              spec.config)
    assert [s.name for s in variant_specs() if s.gated] == ["ganet"]
    assert variant_spec("standard").ops is None


def test_what_a_variant_adds_to_the_toolkit_is_read_from_its_spec():
    from attndeploy.checkpoint import sub_limits
    from attndeploy.models import build_model
    from attndeploy.training.config import PRETRAINED_DEFAULTS, REAL_TEXT_DEFAULTS, TASK_DEFAULTS
    from attndeploy.training.distill import dense_gate_config
    from attndeploy.variants.ganet.layer import GateController

    ganet = variant_spec("ganet")
    config = ModelConfig(vocab_size=5, num_labels=2, variant="ganet", d_model=8, n_heads=2,
                         n_layers=1, d_ff=8, max_seq=8)
    assert isinstance(build_model(config).gates, GateController)  # its gate machinery
    assert ganet.training.penalty_weight(config.ganet) == config.ganet.density_weight
    assert dense_gate_config(config).ganet.density_weight == 0.0  # its teacher, via the hook
    # The presets: its own fields on top of everyone's, none where it declares none.
    assert REAL_TEXT_DEFAULTS.options_for("ganet") == dict(ganet.preset("data").config)
    assert REAL_TEXT_DEFAULTS.training_for("ganet").distill == 0.5
    assert TASK_DEFAULTS.training_for("ganet") == TASK_DEFAULTS.training
    assert PRETRAINED_DEFAULTS.options_for("evolving") == {"alpha": 0.3, "beta": 0.5,
                                                           "evolving_layers": "upper_half"}
    assert PRETRAINED_DEFAULTS.training_for("ganet").density_target == 0.6
    assert sub_limits() == {("qvi", "pairwise_chunk"): 1_048_576, ("ganet", "aux_hidden"): 65_536}
    assert {s.name: s.figures for s in variant_specs() if s.figures} == {
        "ganet": ("gates",), "evolving": ("layer_maps",)}
    assert [s.title for s in variant_specs()] == ["standard", "QVI", "GA-Net", "Evolving attention"]
    # What the Hugging Face conversion and the built-in models read: chained layers, layer spans,
    # the density penalty's starting weight and the dense-gate teacher.
    assert [s.name for s in variant_specs() if s.chained] == ["evolving"]
    assert {s.name: s.layer_span for s in variant_specs() if s.layer_span} == {
        "ganet": "gated_layers", "evolving": "evolving_layers"}
    assert ganet.density_weight(config.ganet) == config.ganet.density_weight
    assert variant_spec("qvi").density_weight(config.qvi) == 0.0
    assert ganet.dense_gate(config.ganet).density_weight == 0.0
    with pytest.raises(ConfigError, match="applies to gated variants"):
        variant_spec("qvi").dense_gate(config.qvi)


@pytest.mark.parametrize("changes, message", [
    ({"outputs": ("gates",)}, "needs `gating`"),
    ({"presets": {"weekend": None}}, "unknown presets"),
    ({"figures": ("histogram",)}, "unknown figures"),
    ({"limits": {"width": 4}}, "has limits but no config"),
    ({"layer_span": "gated_layers"}, "layer_span 'gated_layers' is not a field of its config"),
], ids=["gated without machinery", "preset", "figure", "limits", "layer span"])
def test_a_spec_that_cannot_work_is_refused_when_declared(changes, message):
    with pytest.raises(ConfigError, match=message):
        dataclasses.replace(variant_spec("standard"), name="broken", **changes)


def test_unknown_variant_fails_listing_the_valid_names():
    with pytest.raises(ConfigError) as err:
        get_variant("flash")
    assert "'flash'" in str(err.value)
    assert all(name in str(err.value) for name in VARIANT_NAMES)


def test_registering_a_name_twice_is_refused_and_leaves_the_registry_intact():
    before = registered_variants()
    with pytest.raises(ConfigError, match="registered twice"):
        register_variant(dataclasses.replace(variant_spec("standard"), summary="impostor"))
    assert registered_variants() == before
    assert variant_spec("standard").summary != "impostor"


def test_reading_specs_and_configs_imports_neither_torch_nor_onnxscript():
    code = ("import sys; from attndeploy.variants import variant_specs; "
            "from attndeploy.config import ModelConfig; variant_specs(); "
            "ModelConfig(vocab_size=5, num_labels=2, variant='ganet'); "
            "sys.exit(1 if {'torch', 'onnxscript'} & set(sys.modules) else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_call_op_runs_the_functional_reference_outside_export():
    q, k, v = qkv(1, 2, 3, 4)
    mask = lengths_mask([3])
    out, logits = call_op(Fn.evolving_attention_start, q, k, v, mask)
    ref_out, ref_logits = Fn.evolving_attention_start(q, k, v, mask)
    assert torch.equal(out, ref_out) and torch.equal(logits, ref_logits)


def test_call_op_runs_the_torch_custom_op_while_torch_export_traces():
    class Block(torch.nn.Module):
        def forward(self, q, k, v, mask):
            return call_op(Fn.evolving_attention_start, q, k, v, mask)

    q, k, v = qkv(1, 2, 3, 4)
    program = torch.export.export(Block(), (q, k, v, lengths_mask([3])), strict=False)
    targets = {str(node.target) for node in program.graph.nodes if node.op == "call_function"}
    assert "attndeploy.evolving_attention_start.default" in targets


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


def test_a_model_config_names_its_variant_s_own_sub_config():
    from attndeploy.config import ModelConfig

    sizes = dict(vocab_size=5, num_labels=2, d_model=8, n_heads=2, n_layers=1, d_ff=8, max_seq=8)
    ganet = ModelConfig(variant="ganet", **sizes)
    assert ganet.sub_config is ganet.ganet
    assert ModelConfig(variant="standard", **sizes).sub_config is None
