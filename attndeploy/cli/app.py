"""The Typer application and the one place where errors become messages and exit codes."""

from __future__ import annotations

import importlib
import os
import sys
import tempfile
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import typer

from attndeploy.cli.deprecated import rewrite_json_path
from attndeploy.cli.output import print_error, print_warning
from attndeploy.errors import AttnDeployError

app = typer.Typer(
    name="attndeploy",
    help="Train, export, validate, package and serve research attention variants.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain help text: in Typer's "rich" mode a "[default: CKPT/model.onnx]" in a help string is
    # read as markup and vanishes, and every option's help would need escaping.
    rich_markup_mode=None,
)

INTERRUPTED = 130  # 128 + SIGINT, the shell's code for a Ctrl-C

# command name -> module under attndeploy.cli exposing `command`
COMMANDS = {
    "train": ("train", "command"),
    "info": ("info", "command"),
    "export": ("export", "command"),
    "inspect": ("inspect", "command"),
    "validate": ("validate", "command"),
    "optimize": ("optimize", "command"),
    "package": ("package", "command"),
    "check-repo": ("check_repo", "command"),
    "serve": ("serve", "command"),
    "stop": ("serve", "stop_command"),
    "infer": ("infer", "command"),
    "predict": ("predict", "command"),
    "loadtest": ("loadtest", "command"),
    "quickstart": ("quickstart", "command"),
    "deploy": ("deploy", "command"),
}

for name, (module, function) in COMMANDS.items():
    app.command(name)(getattr(importlib.import_module(f"attndeploy.cli.{module}"), function))


def main() -> None:
    """Entry point: every error is one line on stderr and an exit code, never a traceback.

    An AttnDeployError exits 1. A usage error (an unknown option or choice, a missing argument)
    exits 2, as Click's own handler would, but as one line instead of Click's usage block. Ctrl-C
    exits 130. An OSError that no command turned into an AttnDeployError exits 1 in one line;
    any other exception is a bug: one line that says so and where its traceback was saved.
    """
    # old `--json PATH` forms still work
    args, warnings = rewrite_json_path(sys.argv[1:])
    for warning in warnings:
        print_warning(warning)
    try:
        # Returns the exit code of typer.Exit and --help. One program name in every message,
        # however it was started (`python -m attndeploy` included).
        code = app(args=args, standalone_mode=False, prog_name="attndeploy")
    except AttnDeployError as exc:
        print_error(exc.stage, str(exc))
        raise SystemExit(1) from None
    except (typer.Abort, KeyboardInterrupt):  # Click before Typer 0.22 raises Abort
        interrupted()
    except Exception as exc:
        if is_click_error(exc):
            if type(exc).__name__ == "NoArgsIsHelpError":  # its message is the help text
                sys.stderr.write(exc.format_message().rstrip("\n") + "\n")  # type: ignore[attr-defined]
            else:
                print_error("usage" if is_usage_error(exc) else "attndeploy", click_message(exc))
            raise SystemExit(exc.exit_code) from None  # type: ignore[attr-defined]
        if type(exc).__name__ == "Abort":  # the `click` package's, with an older Typer
            interrupted()
        if isinstance(exc, OSError):
            print_error("system", os_error_message(exc))
            raise SystemExit(1) from None
        report_bug(exc)
        raise SystemExit(1) from None
    # Typer 0.22+ turns a KeyboardInterrupt into its own Exit(130), which standalone_mode=False
    # returns as a plain code: that is the only way a Ctrl-C comes back (no command exits 130).
    if code == INTERRUPTED:
        interrupted()
    raise SystemExit(code if isinstance(code, int) else 0)


def interrupted() -> None:
    print_error("attndeploy", "interrupted")
    raise SystemExit(INTERRUPTED)


def os_error_message(exc: OSError) -> str:
    """`path: reason` (or `path -> other: reason`), or the reason alone."""
    reason = exc.strerror or " ".join(str(exc).split()) or type(exc).__name__
    where = [str(name) for name in (exc.filename, exc.filename2) if name is not None]
    return f"{' -> '.join(where)}: {reason}" if where else reason


# --------------------------------------------------------------------------- bugs

MAX_BUG_MESSAGE = 300  # characters of the exception's message on the one line


def crash_log_folders() -> list[Path]:
    """Where a bug's traceback goes, best first: $XDG_STATE_HOME/attndeploy (by default
    ~/.local/state/attndeploy, the XDG place for logs), then the temp folder."""
    folders = []
    state = os.environ.get("XDG_STATE_HOME", "")
    try:
        base = Path(state) if os.path.isabs(state) else Path.home() / ".local" / "state"
        folders.append(base / "attndeploy")
    except RuntimeError:  # no home folder to be found
        pass
    folders.append(Path(tempfile.gettempdir()) / "attndeploy")
    return folders


def write_crash_log(exc: BaseException) -> tuple[Path | None, str]:
    """Save the traceback of `exc` (atomically); (its path, "") or (None, why it failed)."""
    from attndeploy import __version__
    from attndeploy.fsutil import atomic_write_text

    now = datetime.now(timezone.utc)
    text = "".join([
        f"attndeploy {__version__} crashed at {now.isoformat(timespec='seconds')}\n",
        f"command: attndeploy {' '.join(sys.argv[1:])}\n",
        f"python: {sys.version.split()[0]} on {sys.platform}\n\n",
        *traceback.format_exception(type(exc), exc, exc.__traceback__),
    ])
    name = f"crash-{now.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    failure = ""
    for folder in crash_log_folders():
        try:
            atomic_write_text(folder / name, text)
        except (AttnDeployError, OSError) as write_error:
            failure = str(write_error)
            continue
        return folder / name, ""
    return None, failure


def exception_name(exc: BaseException) -> str:
    cls = type(exc)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def report_bug(exc: BaseException) -> None:
    """One line for an exception attndeploy did not expect, its traceback saved to a file."""
    message = " ".join(str(exc).split())
    if len(message) > MAX_BUG_MESSAGE:
        message = message[: MAX_BUG_MESSAGE - 1] + "…"
    summary = f"{exception_name(exc)}: {message}" if message else exception_name(exc)
    log, failure = write_crash_log(exc)
    where = f"the traceback is in {log}" if log else f"its traceback could not be saved ({failure})"
    print_error("bug", f"{summary} — this is a bug in attndeploy; {where}")


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
