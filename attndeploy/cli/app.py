"""The Typer application and the one place where errors become messages and exit codes."""

from __future__ import annotations

import errno
import importlib
import os
import select
import sys
import tempfile
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import typer

from attndeploy.cli.deprecated import rewrite_deprecated
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
    "quantize": ("quantize", "command"),
    "held-out": ("held_out", "command"),
    "debug": ("debug", "command"),
    "tune": ("tune", "command"),
    "generate": ("generate", "command"),
    "convert": ("convert", "command"),
}

for name, (module, function) in COMMANDS.items():
    app.command(name)(getattr(importlib.import_module(f"attndeploy.cli.{module}"), function))


def main() -> None:
    """Entry point: every error is one line on stderr and an exit code, never a traceback.

    An AttnDeployError exits 1. A usage error (an unknown option or choice, a missing argument)
    exits 2, as Click's own handler would, but as one line instead of Click's usage block. Ctrl-C
    exits 130. An OSError that no command turned into an AttnDeployError exits 1 in one line;
    any other exception is a bug: one line that says so and where its traceback was saved.
    A reader that leaves early (`attndeploy predict ... --json | head -1`) ends the command
    quietly with exit 0, as it ends other Unix tools.
    """
    # old spellings still work for one release, each with a warning
    args, warnings = rewrite_deprecated(sys.argv[1:], value_options)
    for warning in warnings:
        print_warning(warning)
    code = run(args)
    try:
        sys.stdout.flush()  # a reader that left shows here, not in Python's exit-time flush
    except OSError as exc:
        mute_stdout()
        if not is_broken_pipe(exc):
            print_error("system", os_error_message(exc))
            code = code or 1
    raise SystemExit(code)


def value_options(command: str) -> set[str]:
    """The option names of `command` that take a value (empty for an unknown command)."""
    click_command = typer.main.get_command(app).commands.get(command)  # type: ignore[attr-defined]
    if click_command is None:
        return set()
    return {name for param in click_command.params
            if param.param_type_name == "option" and not getattr(param, "is_flag", False)
            for name in param.opts}


def run(args: list[str]) -> int:
    """Run the command line `args`; its exit code, every error printed as one line."""
    try:
        # Returns the exit code of typer.Exit and --help. One program name in every message,
        # however it was started (`python -m attndeploy` included).
        code = app(args=args, standalone_mode=False, prog_name="attndeploy")
    except AttnDeployError as exc:
        print_error(exc.stage, str(exc))
        return 1
    except (typer.Abort, KeyboardInterrupt):  # Click before Typer 0.22 raises Abort
        return interrupted()
    except SystemExit as exc:
        # Typer turns an EPIPE into a silent exit 1, and rich exits 1 when its write meets a
        # broken pipe: either way the EPIPE is the exception this exit was raised handling.
        pipe = broken_pipe_in(exc)
        if pipe is None:
            raise
        return stdout_gone() if stdout_reader_left() else os_error(pipe)
    except Exception as exc:
        if is_click_error(exc):
            if type(exc).__name__ == "NoArgsIsHelpError":  # its message is the help text
                sys.stderr.write(exc.format_message().rstrip("\n") + "\n")  # type: ignore[attr-defined]
            else:
                print_error("usage" if is_usage_error(exc) else "attndeploy", click_message(exc))
            return exc.exit_code  # type: ignore[attr-defined]
        if type(exc).__name__ == "Abort":  # the `click` package's, with an older Typer
            return interrupted()
        if broken_pipe_in(exc) is not None and stdout_reader_left():
            return stdout_gone()
        if isinstance(exc, OSError):
            return os_error(exc)
        report_bug(exc)
        return 1
    # Typer 0.22+ turns a KeyboardInterrupt into its own Exit(130), which standalone_mode=False
    # returns as a plain code: that is the only way a Ctrl-C comes back (no command exits 130).
    if code == INTERRUPTED:
        return interrupted()
    return code if isinstance(code, int) else 0


def interrupted() -> int:
    print_error("attndeploy", "interrupted")
    return INTERRUPTED


def os_error(exc: OSError) -> int:
    print_error("system", os_error_message(exc))
    return 1


# --------------------------------------------------------------------------- a closed stdout


def is_broken_pipe(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno == errno.EPIPE


def broken_pipe_in(exc: BaseException) -> OSError | None:
    """The EPIPE error `exc` is, was raised from or was raised while handling; None if none."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if is_broken_pipe(current):
            return current  # type: ignore[return-value]
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def stdout_reader_left() -> bool:
    """Whether stdout is a pipe (or socket) that nobody reads any more: rich has met it and
    muted its console already, or polling stdout reports an error or a hang-up. An EPIPE from
    elsewhere (a socket, a child's pipe) is an error like any other."""
    from attndeploy.cli.output import console

    if console.quiet:  # rich's Console.on_broken_pipe mutes it (and points stdout at devnull)
        return True
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (a test's capture)
        return False
    if not hasattr(select, "poll"):
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def stdout_gone() -> int:
    """End quietly: the reader has what it wanted (exit 0, nothing on stderr)."""
    mute_stdout()
    return 0


def mute_stdout() -> None:
    """Point stdout at /dev/null, so that Python's flush at exit finds no broken pipe and
    prints no 'Exception ignored ... BrokenPipeError' (the recipe of Python's signal docs)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)
    except (AttributeError, OSError, ValueError):  # no real stdout to point anywhere
        pass


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
