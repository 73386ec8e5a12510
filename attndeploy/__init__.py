"""attndeploy: take research attention variants (QVI, GA-Net, Evolving Attention) from a PyTorch
checkpoint to a validated ONNX model served by Triton."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "load_checkpoint", "read_checkpoint"]


def __getattr__(name: str):  # lazy: `import attndeploy` stays cheap for the CLI
    if name in ("load_checkpoint", "read_checkpoint"):
        from attndeploy import checkpoint

        return getattr(checkpoint, name)
    raise AttributeError(name)
