"""`attndeploy validate`: parity of an exported ONNX file with its checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from attndeploy.cli.options import CheckpointArg
from attndeploy.cli.output import console


def command(
    checkpoint: CheckpointArg,
    model: Annotated[Path, typer.Argument(help="ONNX file exported from the checkpoint.")],
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the JSON report here.")
    ] = None,
    markdown: Annotated[Path | None, typer.Option(help="Write a Markdown report here.")] = None,
    atol: Annotated[float | None, typer.Option(help="Absolute tolerance [by dtype].")] = None,
    rtol: Annotated[float | None, typer.Option(help="Relative tolerance [by dtype].")] = None,
    shapes: Annotated[
        str | None, typer.Option(help="Shapes BxS, comma-separated [default: the grid].")
    ] = None,
    providers: Annotated[
        str | None, typer.Option(help="onnxruntime providers, comma-separated.")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the random inputs.")] = 0,
) -> None:
    """Compare PyTorch with onnxruntime (all/no optimizations) and the ONNX reference evaluator."""
    from rich.markup import escape
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from attndeploy.errors import ValidationError
    from attndeploy.validate.validator import ValidationOptions, validate_model

    progress = Progress(TextColumn("[bold]validate"), BarColumn(),
                        TextColumn("{task.completed}/{task.total} {task.description}"),
                        TimeElapsedColumn(), console=console, transient=True)
    with progress:
        options = ValidationOptions(
            atol=atol, rtol=rtol, shapes=shapes, seed=seed, progress=progress,
            providers=tuple(p.strip() for p in providers.split(",")) if providers else None,
        )
        report = validate_model(checkpoint, model, options)
    if json_path is not None:
        report.write_json(json_path)
    if markdown is not None:
        report.write_markdown(markdown)
    for name, oracle in report.oracles.items():
        status = "[green]passed[/]" if oracle.passed else f"[red]{oracle.status}[/]"
        detail = escape(oracle.message or oracle.note)
        console.print(f"{escape(name):>20}: {status} {detail}", highlight=False)
    if report.gate_summary():
        console.print(f"gates: {escape(str(report.gate_summary()))}", highlight=False)
    if not report.passed:
        failures = report.failures()
        first = failures[0] if failures else {}
        where = ", ".join(f"{k} {first[k]}" for k in ("oracle", "shape", "output") if first.get(k))
        raise ValidationError(
            f"validation failed ({len(failures)} failure(s); first: {where}: "
            f"{first.get('message', '')})" + (f"; report: {json_path}" if json_path else "")
        )
    console.print("[bold green]validation passed[/]")
