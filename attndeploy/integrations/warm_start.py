"""Bringing a warm-started conversion into its variant, and what the conversion added.

`convert(model, variant)` starts at the model's own function (docs/variants.md §7);
`set_warm_start_progress` brings Evolving Attention's mixing weights in, and `added_parameters`
names the parameters the conversion added (the variant's own), which fine-tuning trains at their
own rate.
"""

from __future__ import annotations

from torch import nn

from attndeploy.errors import ConfigError
from attndeploy.integrations.transformers import conversion_of, layer_modules


def set_warm_start_progress(model: nn.Module, fraction: float) -> None:
    """Bring a warm-started model's variant `fraction` (0 to 1) of the way in: Evolving
    Attention's α and β in use become `fraction` times the asked values (other variants learn
    their way and need nothing). Fine-tuning calls it every step until it reaches 1; once at 1
    the model is the variant as configured, which is what a checkpoint records."""
    conversion = conversion_of(model)
    if conversion is None:
        raise ConfigError(f"{type(model).__name__} was not converted by attndeploy")
    conversion.warm_start_progress = min(1.0, max(0.0, float(fraction)))
    for module in layer_modules(model):
        module.attention.set_warm_start_progress(conversion.warm_start_progress)


def added_parameters(model: nn.Module) -> set[str]:
    """Names of the parameters `convert` added that hold no weight of the original model: the
    variant's own (QVI's maps, Evolving Attention's convs, GA-Net's gate network), not the
    layers' Q/K/V and output projections, which are the model's own weights."""
    if conversion_of(model) is None:
        raise ConfigError(f"{type(model).__name__} was not converted by attndeploy")
    own = {id(p) for layer in layer_modules(model)
           for part in (layer.attention.qkv, layer.attention.out) for p in part.parameters()}
    added = {id(p) for layer in layer_modules(model) for p in layer.attention.parameters()}
    gate_network = conversion_of(model).gate_network
    if gate_network is not None:
        added |= {id(p) for p in gate_network.parameters()}
    return {name for name, p in model.named_parameters() if id(p) in added - own}
