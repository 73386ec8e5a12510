"""`tempered`: vanilla attention with a fixed softmax temperature tau (a test variant)."""
# ruff: noqa: I001  (here `attndeploy.variants.tempered` does not exist; ruff sorts it as third-party)

from attndeploy.variants.registry import VariantSpec, register_variant
from attndeploy.variants.tempered.config import TemperedConfig


def _model_ops(config) -> dict[str, int]:
    return {"TemperedAttention": config.n_layers} if config.family == "transformer" else {}


SPEC = register_variant(VariantSpec(
    name="tempered",
    order=4,
    summary="vanilla attention at softmax temperature tau",
    layer="attndeploy.variants.tempered.layer:TemperedAttention",
    config=TemperedConfig,
    ops="attndeploy.variants.tempered.ops",
    model_ops=_model_ops,
))
