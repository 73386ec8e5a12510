"""`sieve`: a gated test variant: a linear scorer over the token embeddings decides which keys
every layer attends to (hard gates at inference, an extra `gates` output)."""
# ruff: noqa: I001  (here `attndeploy.variants.sieve` does not exist; ruff sorts it as third-party)

import dataclasses

from attndeploy.variants.registry import Preset, TrainingHooks, VariantSpec, register_variant
from attndeploy.variants.sieve.config import SieveConfig


def _model_ops(config) -> dict[str, int]:
    """One sieved node per encoder layer, and the shared gated pooling of a classifier."""
    ops = {"SieveAttention": config.n_layers}
    if config.head == "classification":
        ops["GatedAttentionPooling"] = 1
    return ops


def _penalty_weight(config) -> float:  # a SieveConfig
    return config.density_weight


def _without_penalty(config):
    return dataclasses.replace(config, density_weight=0.0)


SPEC = register_variant(VariantSpec(
    name="sieve",
    order=5,
    summary="a linear scorer over the token embeddings gates which keys are attended",
    layer="attndeploy.variants.sieve.layer:SieveAttention",
    config=SieveConfig,
    ops="attndeploy.variants.sieve.ops",
    outputs=("gates",),
    model_ops=_model_ops,
    title="Sieve",
    gating="attndeploy.variants.sieve.layer:SieveGates",
    training=TrainingHooks(penalty_weight=_penalty_weight, without_penalty=_without_penalty),
    presets={"data": Preset(training={"word_dropout": 0.0})},
    limits={"hidden": 4096},
    figures=("gates",),
))
