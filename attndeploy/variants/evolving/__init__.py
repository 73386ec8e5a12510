"""`evolving`: evolving attention (docs/variants.md §4): each layer's logits mix with a 3x3
convolution of the previous layer's."""

from attndeploy.variants.evolving.config import EvolvingConfig
from attndeploy.variants.registry import VariantSpec, register_variant


def _model_ops(config) -> dict[str, int]:
    """A chain over the encoder stack: one start node, then one evolving node per layer."""
    if config.family != "transformer":
        return {}
    ops = {"EvolvingAttentionStart": 1}
    if config.n_layers > 1:
        ops["EvolvingAttention"] = config.n_layers - 1
    return ops


SPEC = register_variant(VariantSpec(
    name="evolving",
    order=3,
    summary="each layer's attention logits mix its own with a 3x3 convolution of the previous",
    layer="attndeploy.variants.evolving.layer:EvolvingAttention",
    config=EvolvingConfig,
    ops="attndeploy.variants.evolving.ops",
    model_ops=_model_ops,
))
