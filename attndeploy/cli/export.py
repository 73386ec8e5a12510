"""`attndeploy export`: a checkpoint, or a user's model (`--factory MODULE:FACTORY`), -> ONNX with
one `attndeploy` node per attention layer call."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from attndeploy.cli.options import (
    FactoryOption,
    ForceFlag,
    JsonFlag,
    Variant,
    WeightsOption,
    shared,
    variant_name,
)
from attndeploy.cli.output import console, print_json

DEFAULT_NAME = "model.onnx"  # the one file export may write inside a checkpoint: its own

OptionalCheckpointArg = Annotated[
    Path | None,
    typer.Argument(help="Checkpoint directory (config.json + model.safetensors); leave it out "
                        "with --factory."),
]

def command(
    checkpoint: OptionalCheckpointArg = None,
    out: Annotated[
        Path | None,
        shared("--out", f"The ONNX file [default: CKPT/{DEFAULT_NAME}] (a translation "
                        "model: a folder, CKPT/export); required with --factory."),
    ] = None,
    factory: FactoryOption = None,
    weights: WeightsOption = None,
    opset: Annotated[
        int | None, typer.Option(help="Default-domain opset (18..23) [default: the exporter's "
                                      "default opset].")
    ] = None,
    fp16: Annotated[bool, typer.Option("--fp16", help="Export in float16.")] = False,
    inline_functions: Annotated[
        bool,
        typer.Option("--inline-functions", help="Inline the op functions (no custom nodes)."),
    ] = False,
    max_seq: Annotated[
        int | None, shared("--max-seq", "The graph accepts at most this [default: the "
                                        "model's].")
    ] = None,
    hf_model: Annotated[Path | None, shared(
        "--hf-model", "a LLaMA-family decoder (a save_pretrained folder or a .gguf file), "
                      "exported with its cache, converted to --variant.")] = None,
    variant: Annotated[str | None, typer.Option(
        parser=variant_name, metavar="[" + "|".join(v.value for v in Variant) + "]",
        help="Attention variant. With --hf-model, warm-started [default: standard, the "
             "model as it is].")] = None,
    force: ForceFlag = False,
    json_output: JsonFlag = False,
) -> None:
    """Export a checkpoint, or your own model (--factory), to ONNX (custom-domain attention nodes
    with function bodies)."""
    from attndeploy.errors import ExportError

    if hf_model is not None or variant is not None:
        _export_pretrained(hf_model, variant, out, checkpoint=checkpoint, factory=factory,
                           max_seq=max_seq, force=force, json_output=json_output,
                           other=fp16 or inline_functions or opset is not None)
        return
    if factory is not None:
        refused = [flag for flag, given in (("a checkpoint argument", checkpoint is not None),
                                            ("--fp16", fp16), ("--max-seq", max_seq is not None))
                   if given]
        if refused:
            raise ExportError(f"--factory exports your own model; {', '.join(refused)} applies to "
                              "a checkpoint only: give one or the other")
        if out is None:
            raise ExportError("--factory needs --out, the ONNX file to write")
        check_user_target(out, weights, force=force)
        _export_user_model(factory, weights, out, opset, inline_functions, json_output)
        return
    if checkpoint is None:
        raise ExportError("give a checkpoint directory, or --factory MODULE:FACTORY for your own "
                          "model")
    if weights is not None:
        raise ExportError("--weights goes with --factory; a checkpoint holds its own weights")
    default = _family_default_target(checkpoint)
    target = out or checkpoint / (default or DEFAULT_NAME)
    # before the seconds of tracing and checks
    check_target(checkpoint, target, force=force, folder_name=default)
    if _exported_by_its_family(checkpoint, target, json_output, fp16=fp16, opset=opset,
                               inline_functions=inline_functions, max_seq=max_seq):
        return

    from attndeploy.export.exporter import ExportOptions, export_checkpoint

    options = ExportOptions(fp16=fp16, inline_functions=inline_functions, max_seq=max_seq,
                            **({} if opset is None else {"opset": opset}))
    with console.status(f"exporting {checkpoint}", spinner="dots") if not json_output else _null():
        result = export_checkpoint(checkpoint, target, options)
    _print_result(result, json_output)


def _exported_by_its_family(checkpoint: Path, target: Path, json_output: bool,
                            **options: object) -> bool:
    """Hand the checkpoint to its family's `export_checkpoint` hook (text-generation exports
    a decoder with its cache: cli/family_hooks.py); False for the common path."""
    from attndeploy.cli.family_hooks import checks_hook, print_summary

    export = checks_hook(checkpoint, "export_checkpoint")
    if export is None:
        return False
    with console.status(f"exporting {checkpoint}", spinner="dots") if not json_output else _null():
        print_summary(export(checkpoint, target, **options), json_output)
    return True


def _export_pretrained(hf_model: Path | None, variant: str | None, out: Path | None, *,
                       checkpoint: Path | None, factory: str | None, max_seq: int | None,
                       force: bool, json_output: bool, other: bool) -> None:
    """`export --hf-model PATH [--variant V] --out FILE`: a pretrained decoder, no training."""
    from attndeploy.cli.family_hooks import print_summary
    from attndeploy.errors import ExportError
    from attndeploy.fsutil import check_output_file, check_replaceable
    from attndeploy.integrations.hf_decoder import export_pretrained

    if hf_model is None:
        raise ExportError("--variant goes with --hf-model (a checkpoint has its own variant)")
    if checkpoint is not None or factory is not None or other:
        raise ExportError("--hf-model exports a pretrained decoder as one fp32 graph with its "
                          "cache: leave out the checkpoint, --factory, --fp16, --opset and "
                          "--inline-functions")
    if out is None:
        raise ExportError("--hf-model needs --out, the ONNX file to write")
    check_output_file(out)
    check_replaceable(out, force=force)
    with console.status(f"exporting {hf_model}", spinner="dots") if not json_output else _null():
        summary = export_pretrained(hf_model, out, variant=variant or "standard",
                                    max_seq=max_seq)
    print_summary(summary, json_output)


def _print_result(result, json_output: bool) -> None:
    if json_output:
        print_json(result.to_json())
        return
    nodes = ", ".join(f"{count}x {op}" for op, count in result.custom_nodes.items()) or "none"
    console.print(
        f"wrote [bold]{result.path}[/] in {result.seconds:.1f} s "
        f"(opset {result.options.opset}{', fp16' if result.options.fp16 else ''}); "
        f"attndeploy nodes: {nodes}"
    )


def _export_user_model(spec: str, weights: Path | None, out: Path, opset: int | None,
                       inline_functions: bool, json_output: bool) -> None:
    """`export --factory`: the factory's module traced on its example inputs (`export_model`)."""
    from attndeploy.cli.user_model import describe, load_user_model
    from attndeploy.errors import AttnDeployError, ExportError
    from attndeploy.export.generic import export_model
    from attndeploy.runtime.names import META_USER_MODEL  # the MODULE:FACTORY it came from

    with console.status(f"exporting {spec}", spinner="dots") if not json_output else _null():
        user = load_user_model(spec, weights)
        try:
            result = export_model(user.module, out, inputs=user.inputs,
                                  dynamic_shapes=user.dynamic_shapes,
                                  inline_functions=inline_functions,
                                  metadata={META_USER_MODEL: spec},
                                  **({} if opset is None else {"opset": opset}))
        except AttnDeployError:
            raise
        except Exception as exc:  # the user's forward may raise anything on its own inputs
            raise ExportError(f"--factory {spec}: running the model on its example inputs "
                              f"failed: {describe(exc)}") from None
    _print_result(result, json_output)




def check_user_target(target: Path, weights: Path | None, *, force: bool) -> None:
    """Refuse an ONNX output of `export --factory` that cannot be written, is the weights file,
    lies inside a checkpoint directory, or exists (unless `force`)."""
    from attndeploy.errors import OutputError
    from attndeploy.fsutil import check_not_an_input, check_output_file, check_replaceable

    check_output_file(target)
    if weights is not None:
        check_not_an_input(target, [weights])
    holder = checkpoint_holding(target)
    if holder is not None:
        raise OutputError(f"cannot write {target}: it lies inside the checkpoint directory "
                          f"{holder}, whose files `attndeploy train` owns; give --out outside it")
    check_replaceable(target, force=force)


def _family_default_target(checkpoint: Path) -> str | None:
    """The folder name a family exports into by default (its checks part's `EXPORT_FOLDER`:
    a translation model is two graphs in one folder), None for one ONNX file."""
    from attndeploy.cli.family_hooks import checks_hook

    if checkpoint is None or not Path(checkpoint).is_dir():
        return None
    name = checks_hook(checkpoint, "EXPORT_FOLDER")
    return name if isinstance(name, str) else None


def check_target(checkpoint: Path, target: Path, *, force: bool,
                 folder_name: str | None = None) -> None:
    """Refuse an ONNX output that cannot be written or would destroy a checkpoint.

    `folder_name`: the family exports a folder (`_family_default_target`), whose default is
    `CKPT/<folder_name>`; an existing folder is then replaced with `force`, a file refused.

    - a folder (for a one-file export), a read-only place, an over-long name
      (fsutil.check_output_file / check_output_dir);
    - the checkpoint itself or one of its files (`--out CKPT/model.safetensors`);
    - any path inside a checkpoint directory (a folder whose config.json is an attndeploy
      checkpoint's, at any depth), except `CKPT/model.onnx` of the checkpoint exported: the
      default, beside the weights it was made from, never the name of a checkpoint file;
    - an existing file, unless `force`.
    """
    from attndeploy.errors import OutputError
    from attndeploy.fsutil import (
        check_not_an_input,
        check_output_dir,
        check_output_file,
        check_replaceable,
        same_path,
    )

    if folder_name is None:
        check_output_file(target)
    else:
        check_output_dir(target)
    check_not_an_input(target, [checkpoint, *_checkpoint_files(checkpoint)])
    holder = checkpoint_holding(target)
    if holder is not None:
        own_default = same_path(holder, checkpoint) and same_path(
            target.parent, checkpoint) and target.name == (folder_name or DEFAULT_NAME)
        if not own_default:
            raise OutputError(
                f"cannot write {target}: it lies inside the checkpoint directory {holder}, "
                "whose files `attndeploy train` owns; give --out outside it (or leave --out "
                f"out to write {Path(checkpoint) / (folder_name or DEFAULT_NAME)})"
            )
    check_replaceable(target, force=force)


def _checkpoint_files(checkpoint: Path) -> list[Path]:
    from attndeploy.checkpoint import CONFIG_FILE, WEIGHTS_FILE

    return [Path(checkpoint) / CONFIG_FILE, Path(checkpoint) / WEIGHTS_FILE]


def checkpoint_holding(path: Path) -> Path | None:
    """The nearest folder above `path` that is an attndeploy checkpoint directory, or None."""
    from attndeploy.checkpoint import CONFIG_FILE, FORMAT, MAX_CONFIG_BYTES
    from attndeploy.errors import CheckpointError
    from attndeploy.jsonread import read_json_file

    for folder in Path(path).resolve().parents:  # resolved: `..` and symbolic links followed
        if not (folder / CONFIG_FILE).is_file():
            continue
        try:
            config = read_json_file(folder / CONFIG_FILE, error=CheckpointError,
                                    max_bytes=MAX_CONFIG_BYTES)
        except CheckpointError:  # unreadable, too large, not JSON: not a checkpoint
            continue
        if isinstance(config, dict) and config.get("format") == FORMAT:
            return folder
    return None


def _null():
    import contextlib

    return contextlib.nullcontext()
