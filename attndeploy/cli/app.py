"""The Typer application and the one place where errors become messages and exit codes."""

from __future__ import annotations

import importlib
from typing import Any

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
    """Entry point: every error is one line on stderr and an exit code, never a traceback.

    An AttnDeployError exits 1. A usage error (an unknown option or choice, a missing argument)
    exits 2, as Click's own handler would, but as one line instead of Click's usage block.
    """
    try:
        # Returns the exit code of typer.Exit and --help. One program name in every message,
        # however it was started (`python -m attndeploy` included).
        code = app(standalone_mode=False, prog_name="attndeploy")
    except AttnDeployError as exc:
        print_error(exc.stage, str(exc))
        raise SystemExit(1) from None
    except (typer.Abort, KeyboardInterrupt):
        print_error("attndeploy", "interrupted")
        raise SystemExit(130) from None
    except Exception as exc:
        if not is_click_error(exc):
            raise
        if type(exc).__name__ != "NoArgsIsHelpError":  # that one has printed the help already
            print_error("usage" if is_usage_error(exc) else "attndeploy", click_message(exc))
        raise SystemExit(exc.exit_code) from None  # type: ignore[attr-defined]
    raise SystemExit(code if isinstance(code, int) else 0)


# Click's errors are matched by shape: recent Typer versions vendor Click privately, older ones
# use the `click` package, and both raise these with `format_message()` and an int `exit_code`.
def is_click_error(exc: BaseException) -> bool:
    return callable(getattr(exc, "format_message", None)) and isinstance(
        getattr(exc, "exit_code", None), int
    )


def is_usage_error(exc: BaseException) -> bool:
    return any(cls.__name__ == "UsageError" for cls in type(exc).__mro__)


def click_message(exc: Any) -> str:
    """Click's message on one line, plus where to read more for a usage error."""
    message = " ".join(exc.format_message().split())
    ctx = getattr(exc, "ctx", None)
    if is_usage_error(exc) and ctx is not None:
        return f"{message.rstrip('.')}; see '{ctx.command_path} --help'"
    return message
