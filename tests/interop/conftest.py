"""Fixtures of the interop matrix (`tests/interop/matrix.py`).

`exports` is tests/export's session fixture (tiny checkpoints of tests/cases.py, each export made
once); `matrix` holds every entry's runs, each made on first use.
"""

from __future__ import annotations

import pytest

from tests.export.conftest import Exports, exports  # noqa: F401  (the fixture, re-used here)
from tests.interop.matrix import Matrix


@pytest.fixture(scope="session")
def matrix(exports: Exports, tmp_path_factory: pytest.TempPathFactory) -> Matrix:  # noqa: F811
    return Matrix(exports, tmp_path_factory.mktemp("interop"))
