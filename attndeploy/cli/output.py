"""Printing helpers: rich for people, JSON for machines, and the one error handler."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.markup import escape

console = Console()
error_console = Console(stderr=True, soft_wrap=True)  # one line per message, never wrapped


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def format_mapping(data: Mapping[str, Any], indent: str = "  ") -> list[str]:
    """`data` as lines a person reads: `key: value`, a nested mapping as `key:` and its own
    lines indented once more. None is "none", a bool "true"/"false", a float its shortest
    form, a list its items comma-separated (an empty one "none"); the JSON output keeps the
    values as they are."""
    lines = []
    for key, value in data.items():
        if isinstance(value, Mapping) and value:
            lines.append(f"{indent}{key}:")
            lines.extend(format_mapping(value, indent + "  "))
        else:
            lines.append(f"{indent}{key}: {format_value(value)}")
    return lines


def named_lines(name: str, data: Any, indent: str = "") -> list[str]:
    """`name: value`, or for a non-empty mapping `name:` and its `format_mapping` lines under it."""
    if not isinstance(data, Mapping) or not data:
        return [f"{indent}{name}: {format_value(data)}"]
    return [f"{indent}{name}:", *format_mapping(data, indent + "  ")]


def format_value(value: Any) -> str:
    """One value of `format_mapping`."""
    if value is None or (isinstance(value, (list, tuple, Mapping)) and not value):
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(format_value(item) for item in value)
    return str(value)


def print_error(stage: str, message: str) -> None:
    error_console.print(f"[bold red]error[/] ({stage}): {escape(message)}", highlight=False)


def print_warning(message: str) -> None:
    error_console.print(f"[yellow]warning[/]: {escape(message)}", highlight=False)
