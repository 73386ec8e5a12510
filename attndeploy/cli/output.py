"""Printing helpers: rich for people, JSON for machines, and the one error handler."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape

console = Console()
error_console = Console(stderr=True, soft_wrap=True)  # one line per message, never wrapped


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def print_error(stage: str, message: str) -> None:
    error_console.print(f"[bold red]error[/] ({stage}): {escape(message)}", highlight=False)


def print_warning(message: str) -> None:
    error_console.print(f"[yellow]warning[/]: {escape(message)}", highlight=False)
