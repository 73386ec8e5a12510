"""`attndeploy train`'s option groups (cli/args/): each group is composed once, each option is
declared by one group, and every group's options are in `train --help`; a variant's spec adds
its own options."""

from __future__ import annotations

import dataclasses

import pytest
import typer
from typer.testing import CliRunner

from attndeploy.cli import train
from attndeploy.cli.app import app
from attndeploy.cli.args.base import OptionGroup, takes_options
from attndeploy.cli.args.variants import VariantArgs
from attndeploy.errors import ConfigError
from attndeploy.variants import registry
from attndeploy.variants.registry import TrainOption, VariantSpec, variant_specs


def _click_params() -> dict[str, object]:
    command = typer.main.get_command(app).commands["train"]  # type: ignore[attr-defined]
    return {param.name: param for param in command.params}


def test_no_option_group_is_composed_twice() -> None:
    kinds = [type(group) for group in train.GROUPS]
    assert len(kinds) == len(set(kinds))


def test_no_option_is_declared_by_two_groups() -> None:
    names = [parameter.name for group in train.GROUPS for parameter in group.parameters()]
    assert sorted(name for name in set(names) if names.count(name) > 1) == []
    assert sorted(names) == sorted(_click_params())  # and the command takes exactly these


def test_composing_two_groups_that_declare_one_option_is_refused() -> None:
    with pytest.raises(TypeError, match="declared by both"):
        takes_options(train.MODEL, train.MODEL)(lambda **values: None)


@pytest.mark.parametrize("group", train.GROUPS, ids=lambda group: type(group).__name__)
def test_each_group_s_options_are_in_the_train_help(group: OptionGroup) -> None:
    help_text = CliRunner().invoke(app, ["train", "--help"], terminal_width=200).output
    params = _click_params()
    for parameter in group.parameters():
        for name in [*params[parameter.name].opts,  # type: ignore[attr-defined]
                     *params[parameter.name].secondary_opts]:  # type: ignore[attr-defined]
            assert name in help_text, (type(group).__name__, name)


def test_each_variant_s_train_options_come_from_its_spec() -> None:
    params = _click_params()
    for spec in variant_specs():
        for option in spec.train_options:
            assert option.option in params[option.option[2:].replace("-", "_")].opts  # type: ignore[attr-defined]


def test_a_plug_in_variant_s_spec_adds_its_own_train_option(monkeypatch) -> None:
    """A variant's package declares its options; the variants' group reads them (nothing in
    cli/ names the variant)."""
    @dataclasses.dataclass(frozen=True)
    class PlugConfig:
        sharpness: float = 2.0

    spec = VariantSpec(name="plug", order=99, summary="a plug-in", layer="m:C",
                       config=PlugConfig,
                       train_options=(TrainOption("sharpness", "Plug: its sharpness."),))
    variant_specs()  # the built-in ones registered first
    monkeypatch.setitem(registry._REGISTRY, "plug", spec)
    parameters = {parameter.name: parameter for parameter in VariantArgs().parameters()}
    assert parameters["sharpness"].default == 2.0
    built = VariantArgs().parse({**{name: p.default for name, p in parameters.items()},
                                 "sharpness": 3.0}, train.TASK, variant="plug",
                                family="transformer", converted=False)
    assert built["plug"] == PlugConfig(sharpness=3.0)


def test_a_train_option_names_a_field_of_its_variant_s_config() -> None:
    @dataclasses.dataclass(frozen=True)
    class PlugConfig:
        sharpness: float = 2.0

    with pytest.raises(ConfigError, match="not fields of its config"):
        VariantSpec(name="plug", order=99, summary="", layer="m:C", config=PlugConfig,
                    train_options=(TrainOption("bluntness", "?"),))
