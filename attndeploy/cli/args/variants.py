"""The variants' own options: each registered variant's `train_options` (declared in its spec,
attndeploy/variants/<name>/__init__.py, e.g. GA-Net's `--temperature`), and `--option
NAME=VALUE` for any field of the trained variant's config. A plug-in variant's spec adds its own
options here; this module names no variant."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Mapping
from enum import Enum
from typing import Annotated, Any

import typer

from attndeploy.cli.args.base import OptionGroup
from attndeploy.cli.args.notes import PRESETS, by_data, show
from attndeploy.cli.defaults import field_default
from attndeploy.cli.options import choices
from attndeploy.variants.registry import PRESET_NAMES, TrainOption, VariantSpec, variant_specs


def parameter_name(option: TrainOption) -> str:
    return option.option.removeprefix("--").replace("-", "_")


def by_preset(spec: VariantSpec, option: TrainOption) -> bool:
    """Whether a preset sets the option's field: its default then depends on what is trained."""
    return any(option.field in spec.preset(name).config for name in PRESET_NAMES)


def preset_value(spec: VariantSpec, option: TrainOption, preset: str) -> Any:
    """The option's field in `preset`: the preset's value, else the config's default."""
    return PRESETS[preset].options_for(spec.name).get(
        option.field, field_default(spec.config, option.field))


def _parameter(spec: VariantSpec, option: TrainOption) -> inspect.Parameter:
    kind: Any = typing.get_type_hints(spec.config)[option.field]
    if option.choices:
        kind = choices(parameter_name(option).title().replace("_", ""), option.choices)
    names = option.option
    if kind is bool:  # a flag and its opposite, as Typer gives a bool parameter
        names += f"/--no-{names.removeprefix('--')}"
    help_text = option.help
    if by_preset(spec, option):
        help_text += " " + by_data(*(preset_value(spec, option, name) for name in PRESET_NAMES
                                     if name != "pretrained" or option.note_pretrained))
        kind, default = kind | None, None
    else:
        default = field_default(spec.config, option.field)
        default = kind(default) if option.choices else default
    return inspect.Parameter(parameter_name(option), inspect.Parameter.KEYWORD_ONLY,
                             annotation=Annotated[kind, typer.Option(names, help=help_text)],
                             default=default)


def _option_fields() -> str:
    """Every registered variant's config fields and defaults, read from its dataclass."""
    listed = []
    for spec in variant_specs():
        if spec.config is not None:
            fields = ", ".join(f"{f.name}={show(field_default(spec.config, f.name))}"
                               for f in dataclasses.fields(spec.config))
            listed.append(f"{spec.name}: {fields}")
    return "; ".join(listed)


class VariantArgs(OptionGroup):
    """The variants' own options, from their specs."""

    @staticmethod
    def options(
        option: Annotated[
            list[str] | None,
            typer.Option("--option", help="A field of the variant's own config as NAME=VALUE "
                         "(repeatable), for any registered variant, e.g. --option "
                         "pairwise_chunk=32; typed and checked by its config. The fields and "
                         "their defaults (a preset may set others, as the named options say): "
                         f"{_option_fields()}."),
        ] = None,
    ) -> None:
        """`--option`; the named options come from the specs."""

    def parameters(self) -> list[inspect.Parameter]:
        named = [_parameter(spec, option) for spec in variant_specs() if spec.config is not None
                 for option in spec.train_options]
        return [*named, *super().parameters()]

    def parse(self, values: Mapping[str, Any], defaults: Any, *, variant: str, family: str,
              converted: bool) -> dict[str, Any]:
        """{variant name: its sub-config} of every variant with named options and of the
        trained one given `--option`: the preset's fields (`defaults`), then the options given.
        `converted`: a Hugging Face model is fine-tuned (`TrainOption.converted`)."""
        from attndeploy.configbase import with_options
        from attndeploy.errors import ConfigError
        from attndeploy.variants.registry import variant_spec

        configs = {}
        for spec in variant_specs():
            if spec.config is None or not spec.train_options:
                continue
            given = {}
            for option in spec.train_options:
                value = values[parameter_name(option)]
                value = value.value if isinstance(value, Enum) else value
                if family in option.pinned:
                    value = option.pinned[family]
                elif value is None and converted and not option.converted:
                    value = field_default(spec.config, option.field)
                if value is not None:
                    given[option.field] = value
            configs[spec.name] = spec.config(**{**defaults.options_for(spec.name), **given})
        if values["option"]:
            spec = variant_spec(variant)
            if spec.config is None:
                raise ConfigError(f"variant {spec.name!r} has no options")
            base = configs.get(spec.name) or spec.config(**defaults.options_for(spec.name))
            configs[spec.name] = with_options(base, values["option"], spec.name)
        return configs
