"""`attndeploy inspect`: what an exported ONNX file holds."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from attndeploy.cli.options import JsonFlag
from attndeploy.cli.output import console, print_json


def command(
    model: Annotated[Path, typer.Argument(help="ONNX file.")],
    json_output: JsonFlag = False,
) -> None:
    """Opsets, custom nodes by type, their functions, symbolic dims and metadata."""
    from attndeploy.export.inspect import format_inspection, inspect_model

    info = inspect_model(model)
    if json_output:
        print_json(info)
    else:
        console.print(format_inspection(info), highlight=False, markup=False)
