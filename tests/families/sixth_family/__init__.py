"""The sixth family's folder, and `load_part`: one of its part modules loaded from its file
under a name of its own, for tests that hold a part to its protocol in this process. Importing
it as `tests.families.sixth_family.text_regression.<part>` would run the family's `__init__`,
which registers the family for every test after it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

FOLDER = Path(__file__).parent / "text_regression"


def load_part(part: str) -> ModuleType:
    """The text-regression family's `part` module (`runtime`, `training`, `checks`), loaded
    once as `sixth_family_text_regression_<part>`."""
    name = f"sixth_family_text_regression_{part}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, FOLDER / f"{part}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
