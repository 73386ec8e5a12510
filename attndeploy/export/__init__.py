"""Export to ONNX: the `attndeploy` custom-domain ops, their function bodies, and the exporter.

Public API: `export_model` (any model that uses `attndeploy.nn` layers, from `generic`),
`export_checkpoint`, `ExportOptions`, `ExportResult`, `read_metadata` (from `exporter`; both
import torch) and `inspect_model` (from `inspect`, which does not). Names are
resolved on first use, so `from attndeploy.export import inspect_model` stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

_PUBLIC = {
    "export_model": "generic",
    "export_checkpoint": "exporter",
    "ExportOptions": "exporter",
    "ExportResult": "exporter",
    "read_metadata": "exporter",
    "inspect_model": "inspect",
    "format_inspection": "inspect",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])
