"""docs/adding-a-family.md is held to the code: its table of built-in families to the registry,
its table of spec fields to `FamilySpec`, and each part's tables to the protocol lists that the
loaders and tests read, which every registered family and the sixth family's parts define."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from attndeploy.families.registry import FamilySpec, family_specs
from attndeploy.models.families import training_part
from attndeploy.runtime import families as runtime_families
from attndeploy.training import families as training_families
from attndeploy.validate import families as checks_families
from tests.families.sixth_family import load_part

ROOT = Path(__file__).resolve().parents[2]
GUIDE = (ROOT / "docs" / "adding-a-family.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    """The guide's text from the heading that starts with `title` to the next heading."""
    start = GUIDE.index(title)
    end = GUIDE.find("\n#", start + len(title))
    return GUIDE[start: end if end != -1 else len(GUIDE)]


def _first_column(text: str) -> list[str]:
    """The backquoted names in the first column of every table row of `text`."""
    return re.findall(r"^\| `([^`]+)` \|", text, flags=re.MULTILINE)


def test_the_built_in_families_table_is_the_registry() -> None:
    rows = re.findall(r"^\| `([a-z-]+)` \| `([a-z_]+)` \|", GUIDE.split("## The package")[0],
                      flags=re.MULTILINE)
    assert rows == [(spec.name, spec.head) for spec in family_specs()]


def test_the_spec_table_lists_every_field_of_family_spec() -> None:
    listed = _first_column(_section("### `__init__.py`"))
    assert listed == [field.name for field in dataclasses.fields(FamilySpec)]


PARTS = {
    "runtime": ("### `runtime.py`", runtime_families.REQUIRED, ()),
    "training": ("### `training.py`", training_families.REQUIRED,
                 training_families.JSONL_READER),
    "checks": ("### `checks.py`", checks_families.REQUIRED, checks_families.OPTIONAL),
}


@pytest.mark.parametrize("part", sorted(PARTS))
def test_each_part_s_tables_are_its_protocol(part: str) -> None:
    title, required, more = PARTS[part]
    assert sorted(_first_column(_section(title))) == sorted([*required, *more])


def _part_module(spec: FamilySpec | None, part: str):
    if spec is None:  # the sixth family, loaded from its folder
        return load_part(part)
    if part == "runtime":
        return runtime_families.runtime_part(spec)
    if part == "training":
        return training_part(spec)
    return checks_families.checks_part(spec)


@pytest.mark.parametrize("spec", [*family_specs(), None],
                         ids=[*(spec.name for spec in family_specs()), "text-regression"])
@pytest.mark.parametrize("part", sorted(PARTS))
def test_every_family_s_parts_define_what_the_guide_requires(spec, part: str) -> None:
    module = _part_module(spec, part)
    _, required, reader = PARTS[part]
    wanted = list(required)
    if part == "training" and module.JSONL_KEYS:
        wanted += list(reader)
    assert [name for name in wanted if not hasattr(module, name)] == []
