"""`attndeploy export`: checkpoint -> ONNX with one `attndeploy` node per attention layer."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from attndeploy.cli.options import CheckpointArg, JsonFlag
from attndeploy.cli.output import console, print_json


def command(
    checkpoint: CheckpointArg,
    out: Annotated[
        Path | None, typer.Option("--out", help="ONNX file to write [default: CKPT/model.onnx].")
    ] = None,
    opset: Annotated[int, typer.Option(help="Default-domain opset (18..23).")] = 18,
    fp16: Annotated[bool, typer.Option("--fp16", help="Export in float16.")] = False,
    inline_functions: Annotated[
        bool,
        typer.Option("--inline-functions", help="Inline the op functions (no custom nodes)."),
    ] = False,
    max_seq: Annotated[
        int | None, typer.Option(help="Largest seq the graph accepts [default: the model's].")
    ] = None,
    json_output: JsonFlag = False,
) -> None:
    """Export a checkpoint to ONNX (custom-domain attention nodes with function bodies)."""
    from attndeploy.export.exporter import ExportOptions, export_checkpoint

    options = ExportOptions(
        opset=opset, fp16=fp16, inline_functions=inline_functions, max_seq=max_seq
    )
    target = out or checkpoint / "model.onnx"
    with console.status(f"exporting {checkpoint}", spinner="dots") if not json_output else _null():
        result = export_checkpoint(checkpoint, target, options)
    if json_output:
        print_json(result.to_json())
        return
    nodes = ", ".join(f"{count}x {op}" for op, count in result.custom_nodes.items()) or "none"
    console.print(
        f"wrote [bold]{result.path}[/] in {result.seconds:.1f} s "
        f"(opset {opset}{', fp16' if fp16 else ''}); attndeploy nodes: {nodes}"
    )


def _null():
    import contextlib

    return contextlib.nullcontext()
