"""Where attention modules call the op-level functions, so the exporter can swap them.

Modules call `call("qvi_attention", *tensors, scale=...)`. Normally that runs the functional
reference in `attndeploy.variants.functional`; inside `override_ops(table)` (entered by the
exporter) it runs the callable registered in `table` under the same name instead, e.g. a torch
custom op that becomes one `attndeploy` ONNX node.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from attndeploy.variants import functional

OP_NAMES = (
    "qvi_attention",
    "qvi_pairwise_attention",
    "gated_attention",
    "gated_attention_pooling",
    "evolving_attention_start",
    "evolving_attention",
)
_overrides: dict[str, Callable[..., Any]] = {}


def call(name: str, *args: Any, **attrs: Any) -> Any:
    """Run op `name` with the current implementation (functional unless overridden)."""
    impl = _overrides.get(name)
    if impl is None:
        impl = getattr(functional, name)
    return impl(*args, **attrs)


@contextmanager
def override_ops(table: dict[str, Callable[..., Any]]) -> Iterator[None]:
    """Within the block, `call(name, ...)` runs `table[name]` for the names in `table`."""
    unknown = sorted(set(table) - set(OP_NAMES))
    if unknown:
        raise KeyError(f"unknown op names: {', '.join(unknown)}")
    saved = dict(_overrides)
    _overrides.update(table)
    try:
        yield
    finally:
        _overrides.clear()
        _overrides.update(saved)
