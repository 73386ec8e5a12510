"""The Typer application and the one place where errors become messages and exit codes."""

from __future__ import annotations

import importlib

import typer

from attndeploy.cli.output import print_error
from attndeploy.errors import AttnDeployError

app = typer.Typer(
    name="attndeploy",
    help="Train, export, validate, package and serve research attention variants.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# command name -> module under attndeploy.cli exposing `command`
COMMANDS = {
    "train": ("train", "command"),
    "info": ("info", "command"),
    "export": ("export", "command"),
    "inspect": ("inspect", "command"),
    "validate": ("validate", "command"),
    "package": ("package", "command"),
    "check-repo": ("check_repo", "command"),
    "serve": ("serve", "command"),
    "stop": ("serve", "stop_command"),
    "infer": ("infer", "command"),
    "loadtest": ("loadtest", "command"),
    "quickstart": ("quickstart", "command"),
}

for name, (module, function) in COMMANDS.items():
    app.command(name)(getattr(importlib.import_module(f"attndeploy.cli.{module}"), function))


def main() -> None:
    """Entry point: an AttnDeployError becomes one message and exit code 1, never a traceback.

    Typer's standalone mode handles usage errors (exit 2), --help and typer.Exit itself.
    """
    try:
        app()
    except AttnDeployError as exc:
        print_error(exc.stage, str(exc))
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        print_error("attndeploy", "interrupted")
        raise SystemExit(130) from None
