"""Tiny decoders of the generation case table (tests/generation/cases.py), each exported once per
session with a word tokenizer, for the decoder tests of `quantize` and `debug compare`; and a
JSONL file of texts the tokenizer reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attndeploy.generation.tokenizer import LMTokenizer
from tests.generation.cases import CASES

TEXTS = ["the cat sat on the mat", "a dog ran to the park", "the dog sat on the mat",
         "a cat ran to the mat", "the park and the cat", "a dog sat", "the mat",
         "a cat and a dog ran to the park"]
TOKENIZER = LMTokenizer.build(TEXTS)
FAST = ("standard", "ganet-mlp")  # the rest are slow: an export traces for seconds
DECODER_PARAMS = [pytest.param(name, id=name, marks=() if name in FAST else pytest.mark.slow)
                  for name in CASES]


class DecoderExports:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._done: dict[str, Path] = {}

    def get(self, name: str) -> Path:
        """The export of case `name` (random weights, seed 0); do not modify it."""
        if name not in self._done:
            from attndeploy.export.decoder import export_decoder
            from tests.generation.cases import tiny_model

            path = self.root / f"{name}.onnx"
            export_decoder(tiny_model(name, vocab=len(TOKENIZER)), TOKENIZER, path)
            self._done[name] = path
        return self._done[name]


def texts_file(path: Path) -> Path:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    return path
