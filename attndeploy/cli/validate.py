"""`attndeploy validate`: parity of an exported ONNX file with its checkpoint, or with a user's
model (`--factory MODULE:FACTORY [--weights W]`, see `user_model.py`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from attndeploy.check_defaults import INPUT_SEED
from attndeploy.cli.options import (
    AtolOption,
    FactoryOption,
    ForceFlag,
    JsonFlag,
    JsonOutOption,
    ProvidersOption,
    RtolOption,
    WeightsOption,
    shared,
)
from attndeploy.cli.output import console, named_lines, print_json


def command(
    checkpoint: Annotated[
        Path | None, typer.Argument(help="Checkpoint directory (config.json + "
                                         "model.safetensors); leave it out with --factory.")
    ] = None,
    onnx_file: Annotated[
        Path | None, typer.Argument(metavar="MODEL", help="ONNX file exported from the "
                                                          "checkpoint (or from --factory).")
    ] = None,
    user_model: FactoryOption = None,
    weights: WeightsOption = None,
    json_output: JsonFlag = False,
    json_path: JsonOutOption = None,
    markdown: Annotated[Path | None, typer.Option(help="Write a Markdown report here.")] = None,
    atol: AtolOption = None,
    rtol: RtolOption = None,
    shapes: Annotated[
        str | None, shared("--shapes", "[default: the grid; with --factory: the example and a "
                                       "grid over its dynamic axes].")
    ] = None,
    providers: ProvidersOption = None,
    seed: Annotated[int, shared("--seed", "(the random inputs)")] = INPUT_SEED,
    force: ForceFlag = False,
) -> None:
    """Compare PyTorch with onnxruntime (all/no optimizations) and the ONNX reference evaluator.

    `attndeploy validate CKPT MODEL.onnx` for a checkpoint's export; `attndeploy validate
    --factory MODULE:FACTORY [--weights W] MODEL.onnx` for your own model: its factory's example
    inputs, then the same inputs resized over their declared dynamic axes."""
    from rich.markup import escape
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from attndeploy.errors import ValidationError
    from attndeploy.output_set import atomic_outputs

    if user_model is None and checkpoint is not None and onnx_file is not None:
        from attndeploy.cli.family_hooks import checks_hook, report_validation

        own = checks_hook(checkpoint, "validate_checkpoint")  # text-generation: a decoder
        if own is not None:
            tolerance = {} if atol is None else {"atol": atol}  # ONNX against PyTorch
            report_validation(own(checkpoint, onnx_file, seed=seed, **tolerance), json_output,
                              json_path, force=force)
            return
    checkpoint, model = _sources(checkpoint, onnx_file, user_model, weights, shapes)
    inputs = [weights] if weights is not None else [checkpoint / n for n in _checkpoint_files()]
    check_inputs_and_outputs(model, inputs, [json_path, markdown], force=force)

    from attndeploy.validate.validator import ValidationOptions, validate_model

    progress = Progress(TextColumn("[bold]validate"), BarColumn(),
                        TextColumn("{task.completed}/{task.total} {task.description}"),
                        TimeElapsedColumn(), console=console, transient=True,
                        disable=json_output)
    with progress:
        options = ValidationOptions(
            atol=atol, rtol=rtol, shapes=shapes, seed=seed, progress=progress,
            providers=tuple(p.strip() for p in providers.split(",")) if providers else None,
        )
        if user_model is not None:
            from attndeploy.cli.validate_user import validate_user_model

            report = validate_user_model(user_model, weights, model, options)
        else:
            report = validate_model(checkpoint, model, options)
    with atomic_outputs(replace=force) as outputs:  # both reports or neither
        if json_path is not None:
            report.write_json(outputs.file(json_path))
        if markdown is not None:
            report.write_markdown(outputs.file(markdown))
    if json_output:
        print_json(report.to_json())
        if not report.passed:
            raise ValidationError(_failure(report, json_path))
        return
    for name, oracle in report.oracles.items():
        status = "[green]passed[/]" if oracle.passed else f"[red]{oracle.status}[/]"
        detail = escape(oracle.message or oracle.note)
        console.print(f"{escape(name):>20}: {status} {detail}", highlight=False)
    gates = report.gate_summary()
    if gates:
        for line in named_lines("gates", gates):
            console.print(line, highlight=False, markup=False)
    if not report.passed:
        raise ValidationError(_failure(report, json_path))
    console.print("[bold green]validation passed[/]")


def _failure(report, json_path: Path | None) -> str:
    failures = report.failures()
    first = failures[0] if failures else {}
    where = ", ".join(f"{k} {first[k]}" for k in ("oracle", "shape", "output") if first.get(k))
    return (f"validation failed ({len(failures)} failure(s); first: {where}: "
            f"{first.get('message', '')})" + (f"; report: {json_path}" if json_path else ""))


def _checkpoint_files() -> list[str]:
    from attndeploy.checkpoint import CONFIG_FILE, WEIGHTS_FILE

    return ["", CONFIG_FILE, WEIGHTS_FILE]


def _sources(checkpoint: Path | None, onnx_file: Path | None, user_model: str | None,
             weights: Path | None, shapes: str | None) -> tuple[Path, Path]:
    """(checkpoint or the weights' folder, ONNX file) from the positional arguments: CKPT MODEL,
    or MODEL alone with --factory."""
    from attndeploy.errors import ValidationError

    if user_model is not None:
        if onnx_file is not None or checkpoint is None:
            raise ValidationError("with --factory give one argument, the ONNX file (no checkpoint)")
        if shapes is not None:
            raise ValidationError("--shapes (BxS) applies to checkpoints; with --factory the "
                                  "shapes come from the factory's example and dynamic axes")
        return Path("."), checkpoint
    if weights is not None:
        raise ValidationError("--weights goes with --factory; a checkpoint holds its own weights")
    if checkpoint is None or onnx_file is None:
        raise ValidationError("give a checkpoint directory and its ONNX file (or --factory "
                              "MODULE:FACTORY and the ONNX file)")
    return checkpoint, onnx_file


def check_inputs_and_outputs(model: Path, inputs: list[Path], reports: list[Path | None], *,
                             force: bool) -> None:
    """Before the work: the ONNX model is a file, and each report path can be written without
    destroying an input (the model, the checkpoint's files or the weights) or the other report."""
    from attndeploy.cli.export import DEFAULT_NAME
    from attndeploy.errors import OutputError, ValidationError
    from attndeploy.fsutil import (
        check_not_an_input,
        check_output_file,
        check_replaceable,
        same_path,
    )

    if model.is_dir():
        inside = model / DEFAULT_NAME
        hint = f" (did you mean {inside}?)" if inside.is_file() else ""
        raise ValidationError(
            f"{model} is a folder; give the ONNX file exported from the checkpoint{hint}"
        )
    written: list[Path] = []
    for path in (p for p in reports if p is not None):
        check_output_file(path)
        check_not_an_input(path, [model, *inputs])
        check_replaceable(path, force=force)
        if any(same_path(path, other) for other in written):
            raise OutputError(f"cannot write {path}: --json-out and --markdown name the same "
                              "file")
        written.append(path)
