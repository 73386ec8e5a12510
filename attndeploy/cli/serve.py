"""`attndeploy serve` and `attndeploy stop`: a local Triton server over a model repository."""

from __future__ import annotations

import shlex
import signal
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from attndeploy.cli.defaults import parameter_default
from attndeploy.cli.options import JsonFlag, RepoOption, StateFileOption, shared
from attndeploy.cli.output import console, error_console, print_json
from attndeploy.serving.packaging.options import DEFAULT_REPOSITORY
from attndeploy.serving.server import TritonServer


def _default(name: str) -> Any:
    """TritonServer's own default (start_background takes the same ones; a test checks it)."""
    return parameter_default(TritonServer.__init__, name)


def _port(help_text: str) -> Any:
    return typer.Option(help=help_text, min=1, max=65535)


def command(
    repo: RepoOption = DEFAULT_REPOSITORY,
    grpc_port: Annotated[int, _port("gRPC port.")] = _default("grpc_port"),
    http_port: Annotated[int, _port("HTTP port.")] = _default("http_port"),
    metrics_port: Annotated[int, _port("Metrics port.")] = _default("metrics_port"),
    host: Annotated[
        str,
        typer.Option(help="Address every endpoint binds to; beyond loopback, front it with a "
                          "proxy that authenticates (tritonserver does not)."),
    ] = _default("host"),
    log_file: Annotated[Path | None, typer.Option(help="Server log file.")] = None,
    tritonserver: Annotated[
        str | None,
        typer.Option(help="tritonserver binary [default: $ATTNDEPLOY_TRITONSERVER, PATH, wheel]."),
    ] = None,
    model: Annotated[
        list[str] | None,
        shared("--model", "Repeatable: serve only these [default: every loadable model]."),
    ] = None,
    ready_timeout: Annotated[
        float, typer.Option(help="Seconds to wait for every model to be ready.")
    ] = _default("ready_timeout_s"),
    background: Annotated[
        bool, typer.Option("--background", help="Start detached; stop with `attndeploy stop`.")
    ] = False,
    state_file: StateFileOption = None,
    guard: Annotated[
        bool,
        typer.Option("--guard/--no-guard",
                     help="Front tritonserver with the request guard, which answers the single "
                          "requests known to end it (see 'Serving safely')."),
    ] = _default("guard"),
    json_output: JsonFlag = False,
) -> None:
    """Start tritonserver on the repository, wait for every model, serve until stopped.

    Serving runs the repository's model.py files; what is served is fixed at start (no client can
    load, unload or replace models).
    """
    from attndeploy.serving.server import exposure_warning, start_background
    from attndeploy.serving.server.launch import servable_models

    warning = exposure_warning(host)
    if warning is not None:
        error_console.print(f"[yellow]warning[/]: {escape(warning)}", highlight=False)
    models, skipped = servable_models(repo, model, tritonserver)
    if not json_output:
        for name, reason in skipped.items():
            console.print(f"[yellow]not serving[/] {name}: {reason}")
    common = dict(grpc_port=grpc_port, http_port=http_port, metrics_port=metrics_port,
                  host=host, log_file=log_file, binary=tritonserver, models=models, guard=guard)
    if background:
        state = start_background(repo, timeout_s=ready_timeout, state_path=state_file, **common)
        if json_output:
            print_json({**state, "not_served": skipped})
        else:
            console.print(f"serving {', '.join(models)} on grpc {state['grpc_url']} "
                          f"(pid {state['pid']}, log {state['log_path']}); stop with "
                          f"`{escape(stop_hint(repo, state_file))}`", highlight=False)
        return
    server = TritonServer(repo, ready_timeout_s=ready_timeout, **common)
    # SIGTERM ends the process like Ctrl-C, so the `with` block stops the server cleanly.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    with server:
        if json_output:
            print_json({"grpc_url": server.grpc_url, "http_url": server.http_url,
                        "pid": server.pid, "models": models, "not_served": skipped,
                        "log_path": str(server.log_path)})
            sys.stdout.flush()  # a pipe reader gets the record now, not when the server stops
        else:
            console.print(f"serving {', '.join(models)} on grpc {server.grpc_url}, http "
                          f"{server.http_url} (log {server.log_path}); Ctrl-C to stop")
        try:
            signal.pause()
        except KeyboardInterrupt:
            console.print("stopping the server")


def stop_hint(repo: Path, state_file: Path | None) -> str:
    """The exact command that stops the server `serve --background` started for these."""
    words = ["attndeploy", "stop"]
    if state_file is not None:
        words += ["--state-file", str(state_file)]
    elif Path(repo) != Path(DEFAULT_REPOSITORY):
        words += ["--repo", str(repo)]
    return shlex.join(words)


def stop_command(
    repo: RepoOption = DEFAULT_REPOSITORY,
    state_file: StateFileOption = None,
    json_output: JsonFlag = False,
) -> None:
    """Stop a server started with `attndeploy serve --background`."""
    from attndeploy.serving.server import default_state_path, stop_background

    result = stop_background(state_file or default_state_path(repo.resolve()))
    if json_output:
        print_json(result)
    else:
        console.print(f"stopped server pid {result['pid']} ({result['signal']}, "
                      f"{result['stop_s']} s)")
