"""One `VariantSpec` per attention variant: the single source everything else reads.

Each variant is one package, `attndeploy/variants/<name>/`, whose `__init__.py` registers its
spec with `register_variant(VariantSpec(...))`: its layer, its config, its ops and its extra
outputs. The packages are found by walking this folder (`variant_specs()`), so no list of
variants exists anywhere else; the CLI choices, the config's sub-configs, the exporter's
expectations, the serving interface and the quickstart all derive from the specs.

Specs are light (no torch, no onnxscript): the layer and the ops are named by import path and
imported on use, so that reading a config or packaging an ONNX file stays cheap.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import pkgutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from attndeploy.errors import ConfigError

_REGISTRY: dict[str, VariantSpec] = {}


def _no_ops(config: Any) -> dict[str, int]:
    return {}


def _no_runs(config: Any) -> int:
    return 0


def _no_check(config: Any) -> None:
    return None


# The training presets `attndeploy train` has (attndeploy/training/config.py): a built-in task, a
# JSONL file trained from scratch, pretrained weights fine-tuned (`--hf-model`).
PRESET_NAMES = ("task", "data", "pretrained")
# The quickstart's figures a variant can ask for (attndeploy/quickstart/report.py): its hard gates
# on held-out examples (a gated variant), its attention maps layer by layer (a variant whose
# layers hand logits on, like Evolving Attention).
FIGURE_KINDS = ("gates", "layer_maps")


@dataclasses.dataclass(frozen=True)
class Preset:
    """What one training preset (`PRESET_NAMES`) sets for one variant, beyond everyone's.

    config:   fields of the variant's sub-config (e.g. GA-Net's relaxation on real text).
    training: fields of `TrainConfig` (e.g. GA-Net's density target when fine-tuning).
    """

    config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    training: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class TrainingHooks:
    """What training needs from a gated variant beyond its layers (light: functions of the
    variant's own sub-config, e.g. `GANetConfig`, which both a built-in model's `ModelConfig` and a
    converted Hugging Face model hold). The density penalty, its controller, the threshold
    calibration and the distillation from a dense-gate run are shared by every gated variant
    (attndeploy/training/); these say how this variant's config drives them.

    penalty_weight:  sub-config -> the starting weight of the `density_penalty` in the loss.
    without_penalty: sub-config -> the same sub-config with the penalty off (the dense-gate
                     teacher).
    """

    penalty_weight: Callable[[Any], float]
    without_penalty: Callable[[Any], Any]


@dataclasses.dataclass(frozen=True)
class TrainOption:
    """A named option of `attndeploy train` for one field of the variant's sub-config: a shortcut
    for `--option FIELD=VALUE`, which sets any field. Light: the CLI builds the option from it
    (cli/args/variants.py), so a variant's package declares its own options and the CLI names
    no variant.

    field:     the sub-config field it sets; the option's type and default are the field's.
    help:      its help text. Where a preset sets the field, the option's default depends on
               what is trained: it defaults to none (the preset's value) and the CLI adds the
               presets' values to the help (a task's and --data's, and with `note_pretrained`
               fine-tuning pretrained weights').
    name:      the option's name; default `--` and the field with dashes.
    choices:   the values it takes (the config's own tuple), shown as its choices.
    note_pretrained: whether its help lists the pretrained preset's value too.
    pinned:    {model family: the value the field always takes in that family}, whatever is given.
    converted: False where its presets' values were measured on the built-in models only: a
               converted Hugging Face model (`--hf-model`) then takes the config's default
               unless the option is given.
    """

    field: str
    help: str
    name: str = ""
    choices: tuple[str, ...] = ()
    note_pretrained: bool = True
    pinned: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    converted: bool = True

    @property
    def option(self) -> str:
        """The option's name (`--temperature`)."""
        return self.name or "--" + self.field.replace("_", "-")


@dataclasses.dataclass(frozen=True, eq=False)
class VariantSpec:
    """An attention variant, declared once in its own package.

    name:        the variant's name (`--variant`, `ModelConfig.variant`, the ONNX metadata).
    order:       its place in tables, CLI choices and the op set (docs/ops.md order).
    summary:     one line on what it changes (help texts, `info`).
    layer:       "module:Class" of its `attndeploy.nn` layer (an `AttentionBase` with
                 `from_config` and `forward_context`).
    config:      its sub-config dataclass, stored as `ModelConfig.<name>`; None if it has none.
    ops:         the module whose `OPS` lists its ops of the `attndeploy` set (`OpSpec`s); None
                 if its layers export as standard ONNX.
    outputs:     model-level outputs beyond `logits`, e.g. ("gates",) for GA-Net.
    families:    the built-in model families it can be used in.
    model_ops:   config -> {op type: count}: the `attndeploy` nodes of a built-in model.
    lstm_runs:   config -> the standard `LSTM` nodes its own modules add (one per direction run).
    check:       config -> None: constraints on the whole model config (raise ConfigError).
    export_check: config -> None: why a config cannot be exported (raise ExportError).
    title:       its name in prose, report headings and figures ("GA-Net"); default `name`.
    gating:      "module:Class" of its gate machinery (attndeploy/variants/_gating.py), built once
                 per model as `Class(embed_dim, model_config)`; required with the `gates` output.
    training:    its `TrainingHooks`; required with the `gates` output.
    presets:     {preset name: Preset}: its own settings in `attndeploy train`'s presets.
    limits:      {sub-config field: largest value} a checkpoint's config.json may ask for (the
                 size fields a hostile config could blow up, like GA-Net's `aux_hidden`).
    figures:     the quickstart figures it asks for (`FIGURE_KINDS`).
    chained:     whether its layers hand a tensor on to the next (`LayerResult.logits`, as
                 Evolving Attention's logits): they must run once each, in order (a converted
                 Hugging Face model then refuses gradient checkpointing).
    layer_span:  the sub-config field (one of `configbase.LAYER_SPANS`) that confines the variant
                 to the upper layers of a converted Hugging Face model ("gated_layers"); its own
                 models run it in every layer and refuse any other value than "all". A gated
                 variant's lower layers then run with every gate open (the conversion does it);
                 another reads the field in its layer's `from_config`.
    train_options: its named `attndeploy train` options (`TrainOption`s, e.g. GA-Net's
                 `--temperature`); `--option NAME=VALUE` sets any field of its config.
    """

    name: str
    order: int
    summary: str
    layer: str
    config: type | None = None
    ops: str | None = None
    outputs: tuple[str, ...] = ()
    families: tuple[str, ...] = ("transformer",)
    model_ops: Callable[[Any], dict[str, int]] = _no_ops
    lstm_runs: Callable[[Any], int] = _no_runs
    check: Callable[[Any], None] = _no_check
    export_check: Callable[[Any], None] = _no_check
    title: str = ""
    gating: str | None = None
    training: TrainingHooks | None = None
    presets: Mapping[str, Preset] = dataclasses.field(default_factory=dict)
    limits: Mapping[str, int] = dataclasses.field(default_factory=dict)
    figures: tuple[str, ...] = ()
    chained: bool = False
    layer_span: str | None = None
    train_options: tuple[TrainOption, ...] = ()

    def __post_init__(self) -> None:
        if self.gated and (self.gating is None or self.training is None):
            raise ConfigError(f"variant {self.name!r} outputs gates: its spec needs `gating` "
                              "(its gate machinery) and `training` (its TrainingHooks)")
        unknown = [name for name in self.presets if name not in PRESET_NAMES]
        if unknown:
            raise ConfigError(f"variant {self.name!r}: unknown presets {unknown}; "
                              f"valid: {', '.join(PRESET_NAMES)}")
        unknown = [kind for kind in self.figures if kind not in FIGURE_KINDS]
        if unknown:
            raise ConfigError(f"variant {self.name!r}: unknown figures {unknown}; "
                              f"valid: {', '.join(FIGURE_KINDS)}")
        if self.limits and self.config is None:
            raise ConfigError(f"variant {self.name!r} has limits but no config")
        if self.layer_span is not None and (self.config is None or self.layer_span not in {
                field.name for field in dataclasses.fields(self.config)}):
            raise ConfigError(f"variant {self.name!r}: layer_span {self.layer_span!r} is not a "
                              "field of its config")
        fields = ({field.name for field in dataclasses.fields(self.config)}
                  if self.config is not None else set())
        unknown = [option.field for option in self.train_options if option.field not in fields]
        if unknown:
            raise ConfigError(f"variant {self.name!r}: train_options {unknown} are not fields "
                              "of its config")
        if not self.title:
            object.__setattr__(self, "title", self.name)

    @property
    def gated(self) -> bool:
        """Whether its models output `gates` (and run its gate machinery)."""
        return "gates" in self.outputs

    def gating_class(self) -> type:
        """Its gate machinery's class (imports it, and torch)."""
        if self.gating is None:
            raise ConfigError(f"variant {self.name!r} has no gates")
        return _import_attribute(self.gating)

    def density_weight(self, sub_config: Any) -> float:
        """The density penalty's starting weight for its sub-config (its `TrainingHooks`); 0 for
        an ungated variant. Training a built-in model and fine-tuning a converted one read it."""
        return float(self.training.penalty_weight(sub_config)) if self.gated else 0.0

    def dense_gate(self, sub_config: Any) -> Any:
        """Its sub-config with the density penalty off: the dense-gate teacher of `--distill`
        (its `TrainingHooks`); an ungated variant has none."""
        if not self.gated:
            raise ConfigError(f"distillation from a dense-gate teacher applies to gated "
                              f"variants (GA-Net), not {self.name!r}; leave --distill at 0")
        return self.training.without_penalty(sub_config)

    def preset(self, name: str) -> Preset:
        """Its settings in the training preset `name` (empty when it has none there)."""
        return self.presets.get(name, Preset())

    def layer_class(self) -> type:
        return _import_attribute(self.layer)


def _import_attribute(path: str) -> Any:
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


def register_variant(spec: VariantSpec) -> VariantSpec:
    """Register a variant's spec (from its package's `__init__`); a name is registered once."""
    if spec.name in _REGISTRY:
        raise ConfigError(f"variant {spec.name!r} is registered twice")
    _REGISTRY[spec.name] = spec
    return spec


@functools.cache
def _discover() -> None:
    """Import every variant package of this folder; each registers its spec. (Found by the
    folder, not by importing `attndeploy.variants`, whose `__init__` imports this module.)"""
    package = __name__.rpartition(".")[0]
    for module in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if module.ispkg and not module.name.startswith("_"):
            importlib.import_module(f"{package}.{module.name}")


def variant_specs() -> tuple[VariantSpec, ...]:
    """Every registered variant, in `order`."""
    _discover()
    return tuple(sorted(_REGISTRY.values(), key=lambda spec: (spec.order, spec.name)))


def variant_names() -> tuple[str, ...]:
    return tuple(spec.name for spec in variant_specs())


def variant_spec(name: str) -> VariantSpec:
    """The spec registered as `name`; an unknown name lists the valid ones."""
    _discover()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ConfigError(
            f"unknown variant {name!r}; valid: {', '.join(variant_names())}"
        ) from None


def get_variant(name: str) -> type:
    """The layer class of the variant `name` (imports it, and torch)."""
    return variant_spec(name).layer_class()


def registered_variants() -> dict[str, type]:
    """{name: layer class} of every variant (imports them, and torch)."""
    return {spec.name: spec.layer_class() for spec in variant_specs()}


def __getattr__(name: str) -> Any:
    if name == "VARIANT_NAMES":  # the registered names, in order (derived, not declared)
        return variant_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
