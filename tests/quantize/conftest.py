"""Tiny exported models with a vocabulary (tests/runtime/conftest.py's), and labelled texts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.runtime.conftest import TEXTS, TextExports


@pytest.fixture(scope="session")
def text_exports(tmp_path_factory: pytest.TempPathFactory) -> TextExports:
    return TextExports(tmp_path_factory.mktemp("quantize_exports"))


def labelled_texts(path: Path, model_path: Path, *, wrong: int = 0) -> Path:
    """TEXTS labelled with the fp32 model's own predictions (accuracy 1.0 in fp32), the first
    `wrong` of them with another label."""
    from attndeploy.runtime import InferenceModel

    model = InferenceModel(model_path, threads=1)
    rows = []
    for index, prediction in enumerate(model.predict(TEXTS, truncate=True)):
        label = prediction.label
        if index < wrong:
            label = next(name for name in model.labels if name != label)
        rows.append({"text": TEXTS[index], "label": label})
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture(scope="session")
def decoder_exports(tmp_path_factory: pytest.TempPathFactory):
    from tests.quantize.decoders import DecoderExports

    return DecoderExports(tmp_path_factory.mktemp("decoder_exports"))
