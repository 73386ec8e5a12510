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

    check_inputs_and_outputs(checkpoint, model, [json_path, markdown])

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


def check_inputs_and_outputs(checkpoint: Path, model: Path, reports: list[Path | None]) -> None:
    """Before the work: the ONNX model is a file, and each report path can be written without
    destroying an input (the model, the checkpoint's files) or the other report."""
    from attndeploy.checkpoint import CONFIG_FILE, WEIGHTS_FILE
    from attndeploy.cli.export import DEFAULT_NAME
    from attndeploy.errors import OutputError, ValidationError
    from attndeploy.fsutil import check_not_an_input, check_output_file, same_path

    if model.is_dir():
        inside = model / DEFAULT_NAME
        hint = f" (did you mean {inside}?)" if inside.is_file() else ""
        raise ValidationError(
            f"{model} is a folder; give the ONNX file exported from the checkpoint{hint}"
        )
    inputs = [model, checkpoint, checkpoint / CONFIG_FILE, checkpoint / WEIGHTS_FILE]
    written: list[Path] = []
    for path in (p for p in reports if p is not None):
        check_output_file(path)
        check_not_an_input(path, inputs)
        if any(same_path(path, other) for other in written):
            raise OutputError(f"cannot write {path}: --json and --markdown name the same file")
        written.append(path)
