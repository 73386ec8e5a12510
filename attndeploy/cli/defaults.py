"""The library's defaults, read where the CLI declares its options: one source of truth.

An option's default value (and so the `[default: ...]` its help shows) is the default of the
dataclass field or function parameter it is passed to, never a number typed again in `cli/`.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any


def field_default(cls: type, name: str) -> Any:
    """The default of dataclass `cls`'s field `name` (KeyError: no such field or no default)."""
    for field in dataclasses.fields(cls):
        if field.name != name:
            continue
        if field.default is not dataclasses.MISSING:
            return field.default
        if field.default_factory is not dataclasses.MISSING:
            return field.default_factory()
        break
    raise KeyError(f"{cls.__name__}.{name} has no default")


def parameter_default(function: Callable[..., Any], name: str) -> Any:
    """The default of `function`'s parameter `name` (KeyError: no such parameter or no default)."""
    default = inspect.signature(function).parameters[name].default
    if default is inspect.Parameter.empty:
        raise KeyError(f"{function.__qualname__}({name}) has no default")
    return default


def number_list(values: tuple[Any, ...]) -> str:
    """(1, 4, 16) -> "1,4,16", as the number-list options take them."""
    return ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values)
