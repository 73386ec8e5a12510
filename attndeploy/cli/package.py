"""`attndeploy package`: checkpoints or ONNX files -> a Triton model repository."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from attndeploy.cli.options import ForceFlag, JsonFlag
from attndeploy.cli.output import console, print_json
from attndeploy.serving.options import Flavor, Kind


def default_model_name(source: Path) -> str:
    """A checkpoint directory's name; for an ONNX file its stem (its folder's name if 'model')."""
    source = Path(source).resolve()
    if source.is_dir():
        return source.name
    return source.parent.name if source.stem == "model" else source.stem


def command(
    sources: Annotated[
        list[Path], typer.Argument(help="Checkpoint directories or exported ONNX files (a "
                                        "checkpoint's, or your own model's from export "
                                        "--model: served by its declared inputs and outputs).")
    ],
    repo: Annotated[Path, typer.Option(help="Model repository folder.")] = Path(
        "model_repository"
    ),
    flavor: Annotated[Flavor, typer.Option(help="Which Triton model(s) to write.")] = Flavor.PYTHON,
    name: Annotated[
        str | None, typer.Option(help="Model name [default: the checkpoint directory's name, "
                                      "or the ONNX file's stem].")
    ] = None,
    version: Annotated[int, typer.Option(help="Version folder to write.")] = 1,
    max_batch_size: Annotated[int, typer.Option(help="Triton max_batch_size.")] = 8,
    instances: Annotated[int, typer.Option(help="Model instances.")] = 1,
    kind: Annotated[
        Kind, typer.Option(help="Instance kind (gpu: onnxruntime flavour).")
    ] = Kind.CPU,
    dynamic_batching: Annotated[
        bool, typer.Option("--dynamic-batching/--no-dynamic-batching", help="Dynamic batcher.")
    ] = True,
    max_queue_delay_us: Annotated[
        int, typer.Option(help="Longest a request waits to form a batch (µs).")
    ] = 500,
    warmup: Annotated[bool, typer.Option("--warmup/--no-warmup", help="Warm-up request.")] = True,
    threads: Annotated[int, typer.Option(help="onnxruntime intra-op threads per instance.")] = 1,
    text: Annotated[
        bool, typer.Option("--text/--no-text",
                           help="Also write NAME_text (raw text in, label out) for a model with "
                                "a tokenizer.")
    ] = True,
    truncate_text: Annotated[
        bool, typer.Option("--truncate-text",
                           help="The text model keeps the first max_seq tokens of a longer "
                                "text instead of refusing it.")
    ] = False,
    text_instances: Annotated[int, typer.Option(help="Instances of the text model.")] = 1,
    force: ForceFlag = False,
    json_output: JsonFlag = False,
) -> None:
    """Package models into a Triton repository (config.pbtxt, model.onnx, model.py, labels),
    and for a model with a tokenizer the text model NAME_text that takes raw text."""
    from attndeploy.errors import RepositoryError
    from attndeploy.fsutil import check_output_dir
    from attndeploy.serving.options import PackageOptions
    from attndeploy.serving.repository import package_model

    if name is not None and len(sources) > 1:
        raise RepositoryError("--name names one model; give one source per call, or no --name")
    check_output_dir(repo)  # a file or read-only folder fails now, not after exporting
    written = []
    for source in sources:
        options = PackageOptions(  # `--name ''` is refused there, not taken for "no name"
            flavor=flavor, name=default_model_name(source) if name is None else name,
            version=version,
            max_batch_size=max_batch_size, instances=instances, kind=kind,
            dynamic_batching=dynamic_batching, max_queue_delay_us=max_queue_delay_us,
            warmup=warmup, force=force, threads=threads, text=text,
            truncate_text=truncate_text, text_instances=text_instances,
        )
        with console.status(f"packaging {source}") if not json_output else _null():
            written.extend(package_model(source, repo, options, exporter=_export_checkpoint))
    if json_output:
        print_json({"repo": str(repo), "models": [m.to_dict() for m in written]})
        return
    for model in written:
        what = (f"text model calling {model.id_model}" if model.is_text
                else model.to_dict()["flavor"])
        if model.head == "generic":
            console.print(f"packaged [bold]{model.name}[/] ({what}, your model's own inputs "
                          f"and outputs, version {model.version}) -> {model.path}")
            continue
        console.print(f"packaged [bold]{model.name}[/] ({what}, {model.variant}, "
                      f"version {model.version}) -> {model.path}")


def _export_checkpoint(checkpoint: Path, out: Path) -> None:
    """A checkpoint source, exported with the default options into the packager's temp file."""
    from attndeploy.export.exporter import export_checkpoint  # torch: only for a checkpoint

    export_checkpoint(checkpoint, out)


def _null():
    import contextlib

    return contextlib.nullcontext()
