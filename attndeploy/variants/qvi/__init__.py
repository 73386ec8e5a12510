"""`qvi`: query-value interaction (docs/variants.md §2): values replaced by gated query-aware
values."""

from attndeploy.variants.qvi.config import QVI_FORMS, QVIConfig
from attndeploy.variants.registry import TrainOption, VariantSpec, register_variant

FORM_OPS = {"pooled": "QVIAttention", "pairwise": "QVIPairwiseAttention"}


def _model_ops(config) -> dict[str, int]:
    """One QVI node per encoder layer, of the configured form."""
    return {FORM_OPS[config.qvi.form]: config.n_layers} if config.family == "transformer" else {}


SPEC = register_variant(VariantSpec(
    name="qvi",
    order=1,
    summary="values replaced by gated query-aware values (form pooled or pairwise)",
    layer="attndeploy.variants.qvi.layer:QVIAttention",
    config=QVIConfig,
    ops="attndeploy.variants.qvi.ops",
    model_ops=_model_ops,
    title="QVI",
    limits={"pairwise_chunk": 1_048_576},
    train_options=(TrainOption("form", "QVI form.", name="--qvi-form", choices=QVI_FORMS),),
))
