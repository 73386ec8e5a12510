"""`attndeploy export`: checkpoint -> ONNX with one `attndeploy` node per attention layer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from attndeploy.cli.options import CheckpointArg, ForceFlag, JsonFlag
from attndeploy.cli.output import console, print_json

DEFAULT_NAME = "model.onnx"  # the one file export may write inside a checkpoint: its own


def command(
    checkpoint: CheckpointArg,
    out: Annotated[
        Path | None,
        typer.Option("--out", help=f"ONNX file to write [default: CKPT/{DEFAULT_NAME}]."),
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
    force: ForceFlag = False,
    json_output: JsonFlag = False,
) -> None:
    """Export a checkpoint to ONNX (custom-domain attention nodes with function bodies)."""
    target = out or checkpoint / DEFAULT_NAME
    check_target(checkpoint, target, force=force)  # before the seconds of tracing and checks

    from attndeploy.export.exporter import ExportOptions, export_checkpoint

    options = ExportOptions(
        opset=opset, fp16=fp16, inline_functions=inline_functions, max_seq=max_seq
    )
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


def check_target(checkpoint: Path, target: Path, *, force: bool) -> None:
    """Refuse an ONNX output that cannot be written or would destroy a checkpoint.

    - a folder, a read-only place, an over-long name (fsutil.check_output_file);
    - the checkpoint itself or one of its files (`--out CKPT/model.safetensors`);
    - any path inside a checkpoint directory (a folder whose config.json is an attndeploy
      checkpoint's, at any depth), except `CKPT/model.onnx` of the checkpoint exported: the
      default, beside the weights it was made from, never the name of a checkpoint file;
    - an existing file, unless `force`.
    """
    from attndeploy.errors import OutputError
    from attndeploy.fsutil import check_not_an_input, check_output_file, same_path

    check_output_file(target)
    check_not_an_input(target, [checkpoint, *_checkpoint_files(checkpoint)])
    holder = checkpoint_holding(target)
    if holder is not None:
        own_default = same_path(holder, checkpoint) and same_path(
            target.parent, checkpoint) and target.name == DEFAULT_NAME
        if not own_default:
            raise OutputError(
                f"cannot write {target}: it lies inside the checkpoint directory {holder}, "
                "whose files `attndeploy train` owns; give --out outside it (or leave --out "
                f"out to write {Path(checkpoint) / DEFAULT_NAME})"
            )
    if target.exists() and not force:
        raise OutputError(f"{target} already exists; pass --force to replace it")


def _checkpoint_files(checkpoint: Path) -> list[Path]:
    from attndeploy.checkpoint import CONFIG_FILE, WEIGHTS_FILE

    return [Path(checkpoint) / CONFIG_FILE, Path(checkpoint) / WEIGHTS_FILE]


def checkpoint_holding(path: Path) -> Path | None:
    """The nearest folder above `path` that is an attndeploy checkpoint directory, or None."""
    from attndeploy.checkpoint import CONFIG_FILE, FORMAT

    for folder in Path(path).resolve().parents:  # resolved: `..` and symbolic links followed
        try:
            config = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):  # absent, unreadable or not JSON: not a checkpoint
            continue
        if isinstance(config, dict) and config.get("format") == FORMAT:
            return folder
    return None


def _null():
    import contextlib

    return contextlib.nullcontext()
