"""`attndeploy debug compare`: where an exported model diverges, layer by layer, down inside the
`attndeploy` functions (`attndeploy.debug`).

    attndeploy debug compare CKPT MODEL.onnx                     PyTorch (the checkpoint) vs MODEL
    attndeploy debug compare --factory MODULE:FACTORY MODEL.onnx   PyTorch (your model) vs MODEL
    attndeploy debug compare MODEL.onnx --against REF.onnx       REF vs MODEL, no PyTorch
    attndeploy debug compare CKPT MODEL.onnx --against REF.onnx  the same, CKPT makes the inputs
    attndeploy debug compare INT8.onnx --against FP32.onnx       two decoders, step by step

MODEL.onnx is always the model under test; the reference is PyTorch, or `--against`'s file.
An image model (image-classification) is compared on random images of the size its
preprocessing records (`--shapes` are batch sizes), made by its family (`debug.families`).
Decoders (text-generation exports) are compared with `--against` only, step by step
(`attndeploy.debug.decoder_compare`): the logits and every cache entry per decode step.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from attndeploy.check_defaults import INPUT_SEED, TOP_LAYERS
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
from attndeploy.cli.output import console, error_console, print_json


class Action(str, Enum):
    compare = "compare"


def command(
    action: Annotated[Action, typer.Argument(help="What to do: compare, layer by layer.")],
    source: Annotated[
        Path | None, typer.Argument(
            metavar="[SOURCE]", help="Checkpoint directory the model was exported from; leave "
                                     "it out with --factory, optional with --against (then it "
                                     "only makes the inputs).")
    ] = None,
    onnx_file: Annotated[
        Path | None, typer.Argument(metavar="MODEL.onnx", help="The ONNX file under test.")
    ] = None,
    against: Annotated[
        Path | None, typer.Option("--against", metavar="REF.onnx",
                                  help="Compare MODEL.onnx with this ONNX file (e.g. an int8 or "
                                       "fp16 model against its fp32 export) instead of PyTorch.")
    ] = None,
    user_model: FactoryOption = None,
    weights: WeightsOption = None,
    shapes: Annotated[
        str | None, shared("--shapes", "[default: 4x17, seq clipped to the model's max_seq; "
                                       "with --factory: the factory's example]. An image "
                                       "model's are batch sizes (its size is its "
                                       "preprocessing's) [default: 4].")
    ] = None,
    atol: AtolOption = None,
    rtol: RtolOption = None,
    providers: ProvidersOption = None,
    seed: Annotated[int, shared("--seed", "(the random inputs)")] = INPUT_SEED,
    top: Annotated[
        int, typer.Option(min=0, help="Layers listed by the error they add (0: none).")
    ] = TOP_LAYERS,
    json_output: JsonFlag = False,
    json_path: JsonOutOption = None,
    plot: Annotated[Path | None, shared("--plot", "The error by layer (log scale).")] = None,
    steps: Annotated[
        int | None, typer.Option("--decode-steps", min=0,
                                 help="Decoders: decode steps after the prefill [default: 8].")
    ] = None,
    force: ForceFlag = False,
) -> None:
    """Compare every attention node, block and output of MODEL.onnx with its reference on the
    same inputs; name the first divergence and, for an attention node, the first op inside its
    function that diverges. Exits 1 when something diverges (the reports are written first).

    `debug compare CKPT MODEL.onnx`, `debug compare --factory MODULE:FACTORY MODEL.onnx`, or
    `debug compare [CKPT] MODEL.onnx --against REF.onnx` (two ONNX files, no PyTorch)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from attndeploy.debug import DebugOptions
    from attndeploy.errors import ValidationError

    checkpoint, model = _sources(source, onnx_file, user_model, against, shapes)
    decoder = _decoder_mode(checkpoint, model, against, user_model, weights, steps)
    inputs = [p for p in (model, against, weights) if p is not None]
    if checkpoint is not None:
        inputs += _checkpoint_files(checkpoint)
    _check_outputs(inputs, [json_path, plot], force=force)
    progress = Progress(TextColumn("[bold]debug compare"), BarColumn(),
                        TextColumn("{task.completed}/{task.total} {task.description}"),
                        TimeElapsedColumn(), console=error_console, transient=True)
    with progress:
        options = DebugOptions(
            atol=atol, rtol=rtol, progress=progress,
            providers=tuple(p.strip() for p in providers.split(",")) if providers else None,
        )
        if decoder:
            from attndeploy.debug.decoder_compare import DEFAULT_STEPS, compare_decoders

            report = compare_decoders(against, model, options, shape=_decoder_shape(shapes),
                                      steps=DEFAULT_STEPS if steps is None else steps,
                                      seed=seed)
        else:
            report = _run(checkpoint, model, against, user_model, weights, shapes, seed,
                          options)
    _write_reports(report, json_path, plot, force=force)
    if json_output:
        print_json(report.to_json())
    elif decoder:
        _print_decoder(report, top)
    else:
        _print(report, top)
    if not report.passed:
        where = f"; report: {json_path}" if json_path is not None else ""
        raise ValidationError(report.verdict + where)
    if not json_output:
        console.print(f"[bold green]{_escape(report.verdict)}[/]", highlight=False)


# ----------------------------------------------------------------------------- arguments


def _sources(source: Path | None, onnx_file: Path | None, user_model: str | None,
             against: Path | None, shapes: str | None) -> tuple[Path | None, Path]:
    """(checkpoint or None, the ONNX file under test) from the positional arguments."""
    from attndeploy.errors import ValidationError

    given = [p for p in (source, onnx_file) if p is not None]
    if user_model is not None:
        if len(given) != 1:
            raise ValidationError("with --factory give one argument, the ONNX file (no "
                                  "checkpoint)")
        if shapes is not None:
            raise ValidationError("--shapes (BxS) applies to checkpoints; with --factory the "
                                  "inputs are the factory's example")
        return None, given[0]
    if against is not None and len(given) == 1:
        return None, given[0]
    if len(given) != 2:
        raise ValidationError("give a checkpoint directory and its ONNX file, --factory "
                              "MODULE:FACTORY and the ONNX file, or the ONNX file and "
                              "--against REF.onnx")
    return given[0], given[1]


def _decoder_mode(checkpoint: Path | None, model: Path, against: Path | None,
                  user_model: str | None, weights: Path | None, steps: int | None) -> bool:
    """Whether the files are decoders (compared step by step); one clear line for an option
    that does not apply to the kind of model given."""
    from attndeploy.errors import ValidationError
    from attndeploy.quantize.decoder import is_decoder_file

    decoders = [p for p in (model, against) if p is not None and is_decoder_file(p)]
    if not decoders:
        if steps is not None:
            raise ValidationError("--decode-steps is for decoders (text-generation exports); "
                                  f"{model} is not one")
        return False
    if against is None or checkpoint is not None or user_model is not None or weights:
        raise ValidationError(f"{decoders[0]} is a decoder: compare two decoder exports with "
                              "`debug compare MODEL.onnx --against REF.onnx` (no checkpoint, "
                              "--factory or --weights; PyTorch against the export is "
                              "`attndeploy validate`)")
    if len(decoders) != 2:
        raise ValidationError(f"{model} and {against}: one is a decoder (text-generation) and "
                              "the other is not")
    return True


def _decoder_shape(shapes: str | None) -> tuple[int, int] | None:
    """--shapes BxS for decoders: B prompts of at most S tokens (one shape)."""
    from attndeploy.errors import ValidationError

    if shapes is None:
        return None
    try:
        batch, seq = (int(v) for v in shapes.lower().split("x"))
    except ValueError:
        raise ValidationError(f"--shapes {shapes!r}: a decoder takes one BxS (B prompts of at "
                              "most S tokens), e.g. 4x9") from None
    return batch, seq


def _checkpoint_files(checkpoint: Path) -> list[Path]:
    from attndeploy.checkpoint import CONFIG_FILE, WEIGHTS_FILE

    return [checkpoint, checkpoint / CONFIG_FILE, checkpoint / WEIGHTS_FILE]


def _check_outputs(inputs: list[Path], outputs: list[Path | None], *, force: bool) -> None:
    """Before the work: each output can be written, is new (or `force`), destroys no input and
    is not the other."""
    from attndeploy.errors import OutputError
    from attndeploy.fsutil import (
        check_not_an_input,
        check_output_file,
        check_replaceable,
        same_path,
    )

    written: list[Path] = []
    for path in (p for p in outputs if p is not None):
        check_output_file(path)
        check_not_an_input(path, inputs)
        check_replaceable(path, force=force)
        if any(same_path(path, other) for other in written):
            raise OutputError(f"cannot write {path}: --json-out and --plot name the same file")
        written.append(path)


def _write_reports(report: Any, json_path: Path | None, plot: Path | None, *,
                   force: bool) -> None:
    """--json-out and --plot, both or neither: an error or a Ctrl-C between the two leaves none
    (so a rerun needs no --force)."""
    from attndeploy.output_set import atomic_outputs

    with atomic_outputs(replace=force) as outputs:
        if json_path is not None:
            report.write_json(outputs.file(json_path))
        if plot is not None:
            report.write_plot(outputs.file(plot))


# ----------------------------------------------------------------------------- the work


def _run(checkpoint: Path | None, model: Path, against: Path | None, user_model: str | None,
         weights: Path | None, shapes: str | None, seed: int, options: Any) -> Any:
    """The report of the mode the arguments chose (module docstring)."""
    from attndeploy import debug
    from attndeploy.errors import ValidationError

    if weights is not None and user_model is None:
        raise ValidationError("--weights goes with --factory; a checkpoint holds its own weights")
    if against is None and user_model is None:
        return debug.compare_checkpoint(checkpoint, model, options, shapes=shapes, seed=seed)
    user = _user_model(user_model, weights, model) if user_model is not None else None
    if against is None:
        return _guarded(user_model, lambda: debug.compare_module(
            user.module, model, [user.inputs], options, feed_labels=["example"]))
    if user is not None:
        feeds, labels = [user.inputs], ["example"]
    elif checkpoint is not None:
        feeds, labels = debug.checkpoint_feeds(checkpoint, shapes, seed)
    else:
        from attndeploy.debug.sources import load_onnx

        _, metadata = load_onnx(model)
        feeds, labels = debug.metadata_feeds(metadata, shapes, seed, str(model))
    return debug.compare_models(against, model, feeds, options, feed_labels=labels)


def _user_model(spec: str, weights: Path | None, model: Path) -> Any:
    from attndeploy.cli.user_model import load_user_model
    from attndeploy.debug.sources import load_onnx

    load_onnx(model)  # a missing or foreign file is refused before the factory runs
    return load_user_model(spec, weights, stage="validation")


def _guarded(spec: str | None, work: Any) -> Any:
    """Run `work`; an exception of the user's own forward pass becomes one ValidationError."""
    from attndeploy.cli.user_model import describe
    from attndeploy.errors import AttnDeployError, ValidationError

    try:
        return work()
    except AttnDeployError:
        raise
    except Exception as exc:  # the user's forward may raise anything
        raise ValidationError(f"--factory {spec}: running the model failed: "
                              f"{describe(exc)}") from None


# ----------------------------------------------------------------------------- printing


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def _number(value: float | None) -> str:
    from attndeploy.debug.report import short

    return "" if value is None else short(value)


def _print_decoder(report: Any, top: int) -> None:
    """A table of the steps (logits and the worst cache entry), then the layers ranked."""
    from rich import box
    from rich.table import Table

    table = Table(title=f"{_escape(Path(report.candidate).name)} against "
                        f"{_escape(Path(report.reference).name)}: atol "
                        f"{report.tolerance.atol:g}, rtol {report.tolerance.rtol:g}, "
                        f"{report.shape[0]} prompts of up to {report.shape[1]} tokens",
                  title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    for column in ("step", "logits max|Δ|", "‖Δ‖/‖b‖", "worst cache entry", "‖Δ‖/‖b‖",
                   "same token"):
        table.add_column(column, justify="right" if column != "worst cache entry" else "left")
    table.add_column("", no_wrap=True)
    for step in report.steps:
        name, worst = max(step.state.items(), key=lambda item: item[1].rel_error,
                          default=("", None))
        table.add_row("prefill" if step.step == 0 else str(step.step),
                      _number(step.logits.max_abs), _number(step.logits.rel_error),
                      _escape(name), _number(worst.rel_error if worst else None),
                      f"{step.same_token:.0%}",
                      "[green]ok[/]" if step.passed else "[red]✗[/]")
    console.print(table)
    if top and not report.passed:
        ranked = [layer for layer in report.ranked() if layer.added > 0][:top]
        if ranked:
            console.print("cache error grows the most in layer(s): " + ", ".join(
                f"{_escape(layer.layer)} (+{_number(layer.added)})" for layer in ranked),
                highlight=False)
    for note in report.notes:
        console.print(f"note: {_escape(note)}", highlight=False)


def _print(report: Any, top: int) -> None:
    from rich import box
    from rich.table import Table

    table = Table(title=f"{_escape(Path(report.candidate).name)} against "
                        f"{_escape(Path(report.reference).name)}: atol "
                        f"{report.tolerance.atol:g}, rtol {report.tolerance.rtol:g}, "
                        f"{', '.join(report.shapes)}", title_justify="left",
                  box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    gated = any(layer.gates is not None for layer in report.layers)
    table.add_column("layer", overflow="fold")
    table.add_column("type", overflow="fold")
    for column in ("max|Δ|", "‖Δ‖/‖b‖", "added", *(("flips",) if gated else ())):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("", no_wrap=True)
    first = report.first_divergence
    for layer in report.layers:
        status = "[green]ok[/]" if layer.passed else (
            "[bold red]FIRST[/]" if layer is first else "[red]✗[/]")
        flips = ("" if layer.gates is None else str(layer.gates["flips"]),) if gated else ()
        table.add_row(_escape(layer.label), _escape(layer.op_type), _number(layer.max_abs),
                      _number(layer.rel_error), _number(layer.added_error), *flips, status)
    console.print(table)
    if top and not report.passed:
        ranked = [layer for layer in report.ranked()
                  if layer.added_error and not layer.passed][:top]
        if ranked:
            console.print("adds the most error: " + ", ".join(
                f"{_escape(layer.label)} (+{_number(layer.added_error)}"
                + (f"; {len(layer.matmuls)} MatMul/Gemm" if layer.matmuls else "") + ")"
                for layer in ranked), highlight=False)
    inside = report.inside
    if inside is not None:
        console.print(f"inside {_escape(inside.function)} of layer {inside.layer}: "
                      f"{_escape(inside.finding())}", highlight=False)
        console.print(f"  oracle: {_escape(inside.oracle)}", highlight=False)
    for note in report.notes:
        console.print(f"note: {_escape(note)}", highlight=False)
