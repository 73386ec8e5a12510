"""attndeploy: take research attention variants (QVI, GA-Net, Evolving Attention) from a PyTorch
checkpoint to a validated ONNX model served by Triton.

The package root sits in the lowest layer (docs/architecture.md, "Layers"): every import of a
submodule runs it first, so it holds `__version__` and imports nothing of the package. Reading a
checkpoint is `attndeploy.checkpoint`'s (`load_checkpoint`, `read_checkpoint`).
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]

_MOVED = {"load_checkpoint": "attndeploy.checkpoint", "read_checkpoint": "attndeploy.checkpoint"}


def __getattr__(name: str):
    if name in _MOVED:  # the root re-exported them once; it imports nothing of the package now
        raise AttributeError(f"module 'attndeploy' has no attribute {name!r}: use "
                             f"`from {_MOVED[name]} import {name}`")
    raise AttributeError(f"module 'attndeploy' has no attribute {name!r}")
