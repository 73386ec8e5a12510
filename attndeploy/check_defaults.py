"""Defaults of the parity checks (`validate`, `debug compare`), in a module that imports nothing:
the CLI reads them at start, and the checks themselves import torch and onnx."""

from __future__ import annotations

INPUT_SEED = 0  # the random token ids of a parity check
TOP_LAYERS = 5  # `debug compare`: the layers listed by the error they add
