"""`attndeploy quickstart`: the whole pipeline on the built-in task, one report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from attndeploy.cli.defaults import field_default
from attndeploy.cli.options import JsonFlag, shared
from attndeploy.cli.output import console, print_json


def _default(field: str):
    """`QuickstartOptions`' default for `field`."""
    from attndeploy.quickstart.options import QuickstartOptions

    return field_default(QuickstartOptions, field)


def command(
    workdir: Annotated[Path, typer.Option(help="Where checkpoints, ONNX files and the report go.")
                       ] = _default("workdir"),
    repo: Annotated[
        Path, shared("--repo", "Packaged into; the quickstart's own models there (one per "
                               "variant, named after it) are replaced on every run.")
    ] = _default("repo"),
    steps: Annotated[int, shared("--steps", "(Per variant.)", min=1)] = _default("steps"),
    max_train_seconds: Annotated[
        float, typer.Option(help="Stop a variant's training after this many seconds, steps "
                                 "done or not (the report says so); 0: no cap.", min=0)
    ] = _default("max_train_seconds"),
    serve: Annotated[
        bool, typer.Option("--serve/--no-serve", help="Start tritonserver and load-test.")
    ] = _default("serve"),
    json_output: JsonFlag = False,
) -> None:
    """Train every variant, export, validate, package, serve, load-test and write report.md."""
    from attndeploy.errors import ValidationError
    from attndeploy.quickstart.pipeline import QuickstartOptions, run_quickstart

    options = QuickstartOptions(workdir=workdir, repo=repo, steps=steps, serve=serve,
                                max_train_seconds=max_train_seconds)
    log = (lambda _msg: None) if json_output else (lambda msg: console.print(msg, highlight=False))
    data = run_quickstart(options, log=log, progress=not json_output)
    if json_output:
        print_json(data)
    else:
        console.print(f"[bold]report:[/] {workdir / 'report.md'} "
                      f"({data['timings_s']['total']:.0f} s in all)")
    if not data["passed"]:
        raise ValidationError(f"a validation or load test failed; see {workdir / 'report.md'}")
