"""`evolving`: evolving attention (docs/variants.md §4): each layer's logits mix with a 3x3
convolution of the previous layer's."""

from attndeploy.variants.evolving.config import EvolvingConfig
from attndeploy.variants.registry import Preset, TrainOption, VariantSpec, register_variant


def _model_ops(config) -> dict[str, int]:
    """A chain over the encoder stack: a start node for layer 0 (and each layer below
    `evolving_layers`), then one evolving node per layer."""
    if config.family != "transformer":
        return {}
    starts = config.evolving.chain_starts(config.n_layers)
    ops = {"EvolvingAttentionStart": starts}
    if config.n_layers > starts:
        ops["EvolvingAttention"] = config.n_layers - starts
    return ops


SPEC = register_variant(VariantSpec(
    name="evolving",
    order=3,
    summary="each layer's attention logits mix its own with a 3x3 convolution of the previous",
    layer="attndeploy.variants.evolving.layer:EvolvingAttention",
    config=EvolvingConfig,
    ops="attndeploy.variants.evolving.ops",
    model_ops=_model_ops,
    title="Evolving attention",
    # Fine-tuned from pretrained weights it warm-starts (docs/variants.md §7) into alpha 0.3,
    # beta 0.5, where the built-in alpha 0.5, beta 1.0 was 1.1 points under standard at seed 0
    # (benchmarks/README.md, `pretrained.py`). With every layer mixing, over three seeds: +0.33
    # against standard on debian, -0.96 on fortunes, and alpha 0.1, beta 0 or alpha 0 did no
    # better there (eighth run). Mixing in the upper half only (the lower half vanilla, as
    # GA-Net gates the upper layers only): +0.08 on debian and +0.11 on fortunes (ninth run).
    presets={"pretrained": Preset(config={"alpha": 0.3, "beta": 0.5,
                                          "evolving_layers": "upper_half"})},
    figures=("layer_maps",),
    chained=True,  # each layer hands its logits to the next
    layer_span="evolving_layers",  # read by its layer's from_config: the lower layers start anew
    train_options=(
        TrainOption("alpha", "Evolving: weight of the previous logits."),
        TrainOption("beta", "Evolving: weight of the conv branch."),
        TrainOption("negative_slope", "Evolving: LeakyReLU slope."),
    ),
))
