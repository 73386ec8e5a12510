"""`attndeploy package`: checkpoints or ONNX files -> a Triton model repository."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from attndeploy.cli.defaults import field_default
from attndeploy.cli.options import ForceFlag, JsonFlag, RepoOption, shared
from attndeploy.cli.output import console, print_json
from attndeploy.serving.packaging.options import DEFAULT_REPOSITORY, Flavor, Kind, PackageOptions


def _default(field: str):
    """`PackageOptions`' default for `field`: the library is the one source of defaults."""
    return field_default(PackageOptions, field)


def command(
    sources: Annotated[
        list[Path], typer.Argument(help="Checkpoint directories or exported ONNX files (a "
                                        "checkpoint's, or your own model's from export "
                                        "--factory: served by its declared inputs and outputs).")
    ],
    repo: RepoOption = DEFAULT_REPOSITORY,
    flavor: Annotated[
        Flavor, typer.Option(help="Which Triton model(s) to write.")
    ] = _default("flavor"),
    model: Annotated[
        str | None, shared("--model", "The name to write [default: the checkpoint "
                                      "directory's name, or the ONNX file's stem].")
    ] = None,
    version: Annotated[int, typer.Option(help="Version folder to write.")] = _default("version"),
    max_batch_size: Annotated[
        int, typer.Option(help="Triton max_batch_size.")
    ] = _default("max_batch_size"),
    instances: Annotated[int, typer.Option(help="Model instances.")] = _default("instances"),
    kind: Annotated[
        Kind, typer.Option(help="Instance kind (gpu: onnxruntime flavour).")
    ] = _default("kind"),
    dynamic_batching: Annotated[
        bool, typer.Option("--dynamic-batching/--no-dynamic-batching", help="Dynamic batcher.")
    ] = _default("dynamic_batching"),
    max_queue_delay_us: Annotated[
        int, typer.Option(help="Longest a request waits to form a batch (µs).")
    ] = _default("max_queue_delay_us"),
    warmup: Annotated[bool, typer.Option("--warmup/--no-warmup", help="Warm-up request.")
    ] = _default("warmup"),
    threads: Annotated[int, shared("--threads", "Per instance.")] = _default("threads"),
    text_model: Annotated[
        bool, typer.Option("--text-model/--no-text-model",
                           help="Also write NAME_text (raw text in, label out) for a model with "
                                "a tokenizer.")
    ] = _default("text"),
    truncate: Annotated[
        bool, shared("--truncate", "(The text model's rule.)")
    ] = _default("truncate_text"),
    text_bls: Annotated[
        bool, typer.Option("--text-bls/--no-text-bls",
                           help="The text model calls the id model through the server (BLS) "
                                "instead of running its ONNX in its own process (one batcher "
                                "for text and id requests, the weights held once; about 12 % "
                                "fewer texts/s).")
    ] = _default("text_bls"),
    text_instances: Annotated[
        int, typer.Option(help="Instances of the text model.")
    ] = _default("text_instances"),
    max_text_bytes: Annotated[
        int, typer.Option(min=1, help="The text model refuses a longer text (UTF-8 bytes) "
                                      "before tokenizing it.")
    ] = _default("max_text_bytes"),
    max_request_bytes: Annotated[
        int, typer.Option(min=1, help="The text model and a generic model's python flavour "
                                      "refuse a larger request (bytes of its inputs).")
    ] = _default("max_request_bytes"),
    max_new_tokens: Annotated[
        int | None, shared("--max-new-tokens", "A decoder's NAME_generate: the most a request "
                                               "may ask for [default: the context less one].",
                           min=1)
    ] = _default("max_new_tokens"),
    force: ForceFlag = _default("force"),
    json_output: JsonFlag = False,
) -> None:
    """Package models into a Triton repository (config.pbtxt, model.onnx, model.py, labels),
    and for a model with a tokenizer the text model NAME_text that takes raw text; an image
    model also gets NAME_image, which takes encoded PNG or JPEG bytes. A decoder
    becomes NAME_generate: text in, token streams out, --max-batch-size sequences batched."""
    from attndeploy.errors import RepositoryError
    from attndeploy.fsutil import check_output_container
    from attndeploy.serving.packaging.options import PackageOptions
    from attndeploy.serving.packaging.repository import check_source_exists, package_model
    from attndeploy.serving.packaging.text_model_names import CALL_ONNXRUNTIME

    if model is not None and len(sources) > 1:
        raise RepositoryError("--model names one model; give one source per call, or no "
                              "--model")
    for source in sources:  # all of them, before the first is packaged
        check_source_exists(source)
    check_output_container(repo)  # a file or read-only folder fails now, not after exporting
    written = []
    for source in sources:
        options = PackageOptions(  # `--model ''` is refused there, not taken for "no name"
            flavor=flavor, name=model,
            version=version,
            max_batch_size=max_batch_size, instances=instances, kind=kind,
            dynamic_batching=dynamic_batching, max_queue_delay_us=max_queue_delay_us,
            warmup=warmup, force=force, threads=threads, text=text_model,
            truncate_text=truncate, text_bls=text_bls, text_instances=text_instances,
            max_text_bytes=max_text_bytes, max_request_bytes=max_request_bytes,
            max_new_tokens=max_new_tokens,
        )
        with console.status(f"packaging {source}") if not json_output else _null():
            written.extend(package_model(source, repo, options, exporter=_export_checkpoint))
    if json_output:
        print_json({"repo": str(repo), "models": [m.to_dict() for m in written]})
        return
    for packaged in written:
        what = packaged.to_dict()["flavor"]
        if packaged.is_text:
            what = (f"text model running {packaged.id_model}'s ONNX in its own process"
                    if packaged.text_call == CALL_ONNXRUNTIME
                    else f"text model calling {packaged.id_model} by BLS")
        if packaged.generate:
            console.print(f"packaged [bold]{packaged.name}[/] (generate model: token streams, "
                          f"up to {packaged.max_batch_size} sequences batched, "
                          f"{packaged.variant}, version {packaged.version}) -> {packaged.path}")
            continue
        if packaged.image:
            console.print(f"packaged [bold]{packaged.name}[/] (image model: encoded PNG or JPEG "
                          f"in, label out, {packaged.variant}, version {packaged.version}) -> "
                          f"{packaged.path}")
            continue
        if packaged.pixels:
            what = f"{what}, pixel tensors in"
        if packaged.head == "generic":
            console.print(f"packaged [bold]{packaged.name}[/] ({what}, your model's own inputs "
                          f"and outputs, version {packaged.version}) -> {packaged.path}")
            continue
        console.print(f"packaged [bold]{packaged.name}[/] ({what}, {packaged.variant}, "
                      f"version {packaged.version}) -> {packaged.path}")


def _export_checkpoint(checkpoint: Path, out: Path) -> None:
    """A checkpoint source, exported with the default options into the packager's temp file
    (by its family's `export_checkpoint` hook where it has one: an image checkpoint)."""
    from attndeploy.cli.family_hooks import checks_hook

    hook = checks_hook(checkpoint, "export_checkpoint")
    if hook is not None:
        hook(checkpoint, out)
        return
    from attndeploy.export.exporter import export_checkpoint  # torch: only for a checkpoint

    export_checkpoint(checkpoint, out)


def _null():
    import contextlib

    return contextlib.nullcontext()
