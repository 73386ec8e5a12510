"""The family registry: every family package registers one spec, found by walking the folder;
names and heads are unique; an unknown one is refused naming the valid ones; reading the specs
imports neither torch nor onnx's heavier parts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import attndeploy.families.registry as registry
from attndeploy.errors import ConfigError
from attndeploy.families import family_for_head, family_names, family_spec, family_specs

PACKAGE = Path(registry.__file__).parent


def test_every_family_package_registers_one_spec_under_the_ecosystem_s_task_name() -> None:
    packages = sorted(p.name for p in PACKAGE.iterdir()
                      if (p / "__init__.py").is_file() and not p.name.startswith("_"))
    assert sorted(spec.package.rpartition(".")[2] for spec in family_specs()) == packages
    assert family_names()[:2] == ("text-classification", "token-classification")
    assert [spec.name.replace("-", "_") for spec in family_specs()] == packages


def test_a_head_names_one_family_and_an_unknown_one_lists_the_valid_heads() -> None:
    assert family_for_head("classification").name == "text-classification"
    assert family_for_head("tagging").name == "token-classification"
    with pytest.raises(ConfigError, match="unknown head 'nope'; valid: classification, tagging"):
        family_for_head("nope")
    with pytest.raises(ConfigError, match="unknown model family 'nope'; valid: "
                                          "text-classification, token-classification"):
        family_spec("nope")


def test_registering_a_name_or_head_twice_is_refused_and_leaves_the_registry_intact() -> None:
    before = family_specs()
    twin = registry.FamilySpec(name="other", head="tagging", order=9, summary="x",
                               outputs=lambda n: ())
    with pytest.raises(ConfigError, match="registered twice"):
        registry.register_family(twin, "somewhere")
    assert family_specs() == before


def test_each_part_module_path_defaults_to_the_family_s_own_package() -> None:
    spec = family_spec("token-classification")
    assert spec.part("runtime") == "attndeploy.families.token_classification.runtime"
    with pytest.raises(ConfigError, match="unknown family part 'serving'"):
        spec.part("serving")


def test_the_declared_outputs_are_the_model_level_interface_s() -> None:
    from attndeploy.interface import model_interface, text_inputs

    for spec in family_specs():
        declared = spec.outputs(3)
        interface = model_interface(head=spec.head, num_labels=3, gated=False)
        assert interface.outputs == declared
        assert interface.inputs == (spec.inputs() if spec.inputs is not None else text_inputs())
        gated = model_interface(head=spec.head, num_labels=3, gated=True).output_names
        assert gated == [*[t.name for t in declared], "gates"]


def test_reading_the_specs_imports_no_torch() -> None:
    code = ("import sys; from attndeploy.families import family_specs; family_specs(); "
            "print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "False"


def test_info_names_a_checkpoint_s_family_by_its_task_name() -> None:
    from typer.testing import CliRunner

    from attndeploy.cli.app import app

    golden = Path(__file__).parent / "golden"
    for head, name in (("classification", "text-classification"),
                       ("tagging", "token-classification")):
        result = CliRunner().invoke(app, ["info", str(golden / head / "checkpoint")])
        assert result.exit_code == 0, result.output
        assert f": {name}, transformer / ganet," in " ".join(result.stdout.split())
