"""The toy models of `toy_models.py`, each exported once per session with `export_model`."""

from __future__ import annotations

import pytest

from tests.nn.toy_models import Exported


@pytest.fixture(scope="session")
def exported(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("nn_exports")
    cache: dict[str, Exported] = {}

    def get(name: str) -> Exported:
        if name not in cache:
            cache[name] = Exported(name, root)
        return cache[name]

    return get


