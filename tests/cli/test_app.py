"""The entry point `attndeploy.cli.app.main`, in process: every error is one line on stderr and
an exit code (usage 2, attndeploy errors 1, bugs 1 with a saved traceback, Ctrl-C 130), --help
and success exit 0. One real Ctrl-C is sent to a training subprocess."""

from __future__ import annotations

import errno
import os
import pty
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from attndeploy.cli import app as cli_app
from attndeploy.cli.deprecated import JSON_PATH_WARNING, rewrite_json_path


def run_main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, *args: str):
    monkeypatch.setattr("sys.argv", ["attndeploy", *args])
    with pytest.raises(SystemExit) as info:
        cli_app.main()
    captured = capsys.readouterr()
    return info.value.code, captured.out, captured.err.strip().splitlines()


USAGE_ERRORS = {
    "unknown command": (["nope"], "No such command 'nope'", "see 'attndeploy --help'"),
    "missing argument": (["info"], "Missing argument", "see 'attndeploy info --help'"),
    "unknown option": (["info", "x", "--colour"], "No such option: --colour",
                       "see 'attndeploy info --help'"),
    "bad integer": (["train", "--steps", "abc"], "Invalid value for '--steps'",
                    "see 'attndeploy train --help'"),
}


@pytest.mark.parametrize("case", sorted(USAGE_ERRORS))
def test_usage_errors_are_one_line_and_exit_2(monkeypatch, capsys, case):
    args, fragment, hint = USAGE_ERRORS[case]
    code, _, err = run_main(monkeypatch, capsys, *args)
    assert code == 2
    assert len(err) == 1, err
    assert err[0].startswith("error (usage): ") and fragment in err[0] and err[0].endswith(hint)


def test_an_attndeploy_error_is_one_line_and_exits_1(monkeypatch, capsys, tmp_path):
    code, _, err = run_main(monkeypatch, capsys, "info", str(tmp_path / "absent"))
    assert code == 1
    assert len(err) == 1 and err[0].startswith("error (checkpoint): "), err


def test_help_exits_0_and_no_arguments_print_the_help_and_exit_2(monkeypatch, capsys):
    code, out, err = run_main(monkeypatch, capsys, "--help")
    assert code == 0 and "quickstart" in out and err == []
    code, out, _ = run_main(monkeypatch, capsys)
    assert code == 2 and "quickstart" in out + "".join(_)


def test_only_clicks_errors_are_turned_into_usage_messages():
    class Shaped(Exception):
        exit_code = 2

        def format_message(self) -> str:
            return "bad"

    assert cli_app.is_click_error(Shaped()) and not cli_app.is_usage_error(Shaped())
    assert not cli_app.is_click_error(ValueError("x"))


# ----------------------------------------------------------------------------- help text


def test_defaults_written_in_help_strings_are_shown(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "200")
    code, out, err = run_main(monkeypatch, capsys, "export", "--help")
    assert code == 0 and err == []
    text = " ".join(out.split())  # however the help is wrapped
    assert "The ONNX file [default: CKPT/model.onnx]" in text
    assert "The graph accepts at most this [default: the model's]." in text


# ----------------------------------------------------------------------------- bugs and OS errors


def replace_command(monkeypatch, name: str, callback) -> None:
    """Make `attndeploy <name>` (no arguments) run `callback` instead."""
    (info,) = [c for c in cli_app.app.registered_commands if c.name == name]
    monkeypatch.setattr(info, "callback", callback)


def raising(exc: BaseException):
    def command() -> None:
        raise exc

    return command


def test_an_unexpected_exception_is_one_line_naming_the_saved_traceback(
    monkeypatch, capsys, tmp_path
):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    replace_command(monkeypatch, "info", raising(ValueError("boom\n  on two lines")))
    code, out, err = run_main(monkeypatch, capsys, "info")
    assert code == 1 and out == ""
    assert len(err) == 1, err
    prefix = ("error (bug): ValueError: boom on two lines — this is a bug in attndeploy; the "
              "traceback is in ")
    assert err[0].startswith(prefix), err[0]
    log = Path(err[0][len(prefix):])
    assert log.parent == tmp_path / "state" / "attndeploy"
    assert log.name.startswith("crash-") and log.name.endswith(f"-{os.getpid()}.log")
    text = log.read_text()
    assert "command: attndeploy info" in text
    assert "Traceback (most recent call last)" in text and "ValueError: boom" in text
    assert [p.name for p in log.parent.iterdir()] == [log.name]  # no temporaries left


def test_a_bug_report_falls_back_to_the_temp_folder(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("XDG_STATE_HOME", "/proc/attndeploy-state")  # cannot be created
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    replace_command(monkeypatch, "info", raising(KeyError("k")))
    code, _, err = run_main(monkeypatch, capsys, "info")
    assert code == 1 and len(err) == 1
    assert err[0].startswith("error (bug): KeyError: 'k' — this is a bug in attndeploy; ")
    log = Path(err[0].split("the traceback is in ", 1)[1])
    assert log.parent == tmp_path / "attndeploy" and "KeyError" in log.read_text()


def test_a_bug_whose_traceback_cannot_be_saved_is_still_one_line(monkeypatch, capsys):
    monkeypatch.setenv("XDG_STATE_HOME", "/proc/attndeploy-state")
    monkeypatch.setattr(tempfile, "tempdir", "/proc/attndeploy-tmp")
    replace_command(monkeypatch, "info", raising(RuntimeError("x" * 1000)))
    code, _, err = run_main(monkeypatch, capsys, "info")
    assert code == 1 and len(err) == 1
    assert err[0].startswith("error (bug): RuntimeError: xxx")
    assert "its traceback could not be saved (cannot write /proc/attndeploy-tmp" in err[0]
    assert len(err[0]) < cli_app.MAX_BUG_MESSAGE + 250  # the message is cut, not the line


def test_an_exception_of_another_package_is_named_with_its_module(monkeypatch, capsys, tmp_path):
    from json import JSONDecodeError

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    replace_command(monkeypatch, "info", raising(JSONDecodeError("bad", "{", 0)))
    _, _, err = run_main(monkeypatch, capsys, "info")
    assert err[0].startswith("error (bug): json.decoder.JSONDecodeError: bad: line 1 column 1")


@pytest.mark.parametrize(
    "exc, expected",
    [
        (PermissionError(13, "Permission denied", "/data/x"), "/data/x: Permission denied"),
        (OSError(28, "No space left on device"), "No space left on device"),
        (FileExistsError(17, "File exists", "a", None, "b"), "a -> b: File exists"),
        (ConnectionResetError("peer went away"), "peer went away"),
    ],
    ids=["path", "no-path", "two-paths", "no-errno"],
)
def test_an_os_error_reaching_main_is_one_line_and_exits_1(monkeypatch, capsys, exc, expected):
    replace_command(monkeypatch, "info", raising(exc))
    code, _, err = run_main(monkeypatch, capsys, "info")
    assert code == 1
    assert err == [f"error (system): {expected}"]


# ----------------------------------------------------------------------------- a closed stdout


def broken_pipe() -> OSError:
    return BrokenPipeError(errno.EPIPE, "Broken pipe")


def typer_style_exit() -> None:
    """What Typer does with an EPIPE from a command: a silent `sys.exit(1)`."""
    try:
        raise broken_pipe()
    except OSError:
        sys.exit(1)


def rich_style_exit() -> None:
    """What rich's Console.on_broken_pipe does: mute the console, then `SystemExit(1)`."""
    from attndeploy.cli.output import console

    try:
        raise broken_pipe()
    except BrokenPipeError:
        console.quiet = True
        raise SystemExit(1) from None


@pytest.mark.parametrize("command", [raising(broken_pipe()), typer_style_exit, rich_style_exit],
                         ids=["raised", "typer-exit", "rich-exit"])
def test_a_reader_that_left_ends_the_command_quietly_with_exit_0(monkeypatch, capsys, command):
    from attndeploy.cli.output import console

    monkeypatch.setattr(console, "quiet", False)
    monkeypatch.setattr(cli_app, "stdout_reader_left",
                        lambda: console.quiet or command is not rich_style_exit)
    replace_command(monkeypatch, "info", command)
    code, out, err = run_main(monkeypatch, capsys, "info")
    assert (code, err) == (0, [])


@pytest.mark.parametrize("command", [raising(broken_pipe()), typer_style_exit],
                         ids=["raised", "typer-exit"])
def test_a_broken_pipe_that_is_not_stdout_is_an_os_error(monkeypatch, capsys, command):
    monkeypatch.setattr(cli_app, "stdout_reader_left", lambda: False)
    replace_command(monkeypatch, "info", command)
    code, _, err = run_main(monkeypatch, capsys, "info")
    assert (code, err) == (1, ["error (system): Broken pipe"])


def test_an_exit_raised_for_another_reason_is_left_alone(monkeypatch, capsys):
    replace_command(monkeypatch, "info", raising(SystemExit(3)))
    code, _, err = run_main(monkeypatch, capsys, "info")
    assert (code, err) == (3, [])


@pytest.mark.parametrize("args", [["--help"], ["info", "--help"]], ids=["app", "command"])
def test_a_closed_stdout_pipe_is_exit_0_with_nothing_on_stderr(args: list[str]) -> None:
    """The reader is gone before anything is written (`attndeploy --help | true`): no
    'Exception ignored ... BrokenPipeError' from Python's exit, no error line, exit 0."""
    read, write = os.pipe()
    os.close(read)
    try:
        result = subprocess.run([sys.executable, "-m", "attndeploy", *args], stdout=write,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, timeout=120)
    finally:
        os.close(write)
    assert (result.returncode, result.stderr.decode()) == (0, "")


def test_a_stdout_that_cannot_be_flushed_is_one_line(monkeypatch, capsys):
    """A full disk under `> file` shows at the final flush: one line, exit 1."""
    flush = sys.stdout.flush

    def full_disk_once() -> None:
        monkeypatch.setattr(sys.stdout, "flush", flush)  # pytest's capture flushes later
        raise OSError(errno.ENOSPC, "No space left on device")

    replace_command(monkeypatch, "info", lambda: None)
    monkeypatch.setattr("sys.argv", ["attndeploy", "info"])
    monkeypatch.setattr(sys.stdout, "flush", full_disk_once)
    with pytest.raises(SystemExit) as info:
        cli_app.main()
    assert info.value.code == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        "error (system): No space left on device"]


# ----------------------------------------------------------------------------- Ctrl-C


@pytest.fixture
def ctrl_c_reaches_python():
    """Python's own SIGINT handler for the test: a job started in the background by a shell
    without job control (`make test &`) inherits SIGINT ignored, and Python then installs none,
    while a user's Ctrl-C always arrives at a terminal's foreground process that has it."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _sigint_as_default() -> None:  # in the child before exec: see ctrl_c_reaches_python
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupt_self() -> None:
    os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C, delivered to this (the main) thread
    time.sleep(10)
    raise AssertionError("SIGINT did not interrupt the command")


@pytest.mark.parametrize("command", [interrupt_self, raising(KeyboardInterrupt())],
                         ids=["sigint", "keyboard-interrupt"])
@pytest.mark.usefixtures("ctrl_c_reaches_python")
def test_ctrl_c_prints_interrupted_and_exits_130(monkeypatch, capsys, command):
    replace_command(monkeypatch, "info", command)
    code, out, err = run_main(monkeypatch, capsys, "info")
    assert code == 130
    assert err == ["error (attndeploy): interrupted"]


@pytest.mark.usefixtures("ctrl_c_reaches_python")
def test_ctrl_c_handled_by_a_command_is_not_an_interruption(monkeypatch, capsys):
    """`serve` stops its server on Ctrl-C and returns normally: exit 0, no message."""
    def serve_like() -> None:
        try:
            interrupt_self()
        except KeyboardInterrupt:
            print("stopping the server")

    replace_command(monkeypatch, "info", serve_like)
    code, out, err = run_main(monkeypatch, capsys, "info")
    assert (code, out, err) == (0, "stopping the server\n", [])


@pytest.mark.integration
def test_ctrl_c_during_training_prints_interrupted_and_exits_130(tmp_path):
    # stdout is a terminal, so the progress bar shows when training has started.
    master, slave = pty.openpty()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TERM": "xterm", "COLUMNS": "120"}
    process = subprocess.Popen(
        [sys.executable, "-m", "attndeploy", "train", "--dataset", "sparse_evidence", "--steps",
         "1000000", "--d-model", "16", "--heads", "2", "--layers", "1", "--d-ff", "16",
         "--n-train", "64", "--n-eval", "16", "--out", "ckpt"],
        cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.PIPE, env=env,
        preexec_fn=_sigint_as_default,
    )
    os.close(slave)
    seen = b""
    try:
        deadline = time.monotonic() + 240
        while b"/1000000" not in seen:  # the bar's step count: training has started
            assert time.monotonic() < deadline and process.poll() is None, seen[-500:]
            if select.select([master], [], [], 0.5)[0]:
                seen += os.read(master, 65536)
        process.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 60
        while process.poll() is None and time.monotonic() < deadline:  # keep the pty drained
            if select.select([master], [], [], 0.2)[0]:
                try:
                    os.read(master, 65536)
                except OSError:
                    break
        stderr = process.communicate(timeout=60)[1].decode()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(master)
    assert process.returncode == 130, stderr
    assert stderr.strip().splitlines() == ["error (attndeploy): interrupted"]
    assert not (tmp_path / "ckpt").exists()


# --------------------------------------------------------------------------- deprecated forms

JSON_REWRITES = {
    "loadtest path": (["loadtest", "--json", "r.json", "--model", "m"],
                      ["loadtest", "--json-out", "r.json", "--model", "m"]),
    "loadtest stdout": (["loadtest", "--model", "m", "--json", "-"],
                        ["loadtest", "--model", "m", "--json"]),
    "loadtest equals form": (["loadtest", "--json=out/r.json"],
                             ["loadtest", "--json-out", "out/r.json"]),
    "validate path": (["validate", "ckpt", "m.onnx", "--json", "r.json"],
                      ["validate", "ckpt", "m.onnx", "--json-out", "r.json"]),
}
JSON_UNCHANGED = {
    "the flag last": ["loadtest", "--model", "m", "--json"],
    "the flag before an option": ["loadtest", "--json", "--model", "m"],
    "already --json-out": ["loadtest", "--json-out", "r.json"],
    "another command": ["serve", "--json", "x"],
    "validate flag before the ONNX file": ["validate", "ckpt", "--json", "m.onnx"],
    "after --": ["loadtest", "--model", "m", "--", "--json", "r.json"],
}


@pytest.mark.parametrize("case", sorted(JSON_REWRITES))
def test_old_json_path_forms_are_rewritten_with_one_warning(case: str) -> None:
    old, new = JSON_REWRITES[case]
    assert rewrite_json_path(old) == (new, [JSON_PATH_WARNING])


@pytest.mark.parametrize("case", sorted(JSON_UNCHANGED))
def test_the_json_flag_and_other_commands_are_left_alone(case: str) -> None:
    args = JSON_UNCHANGED[case]
    assert rewrite_json_path(args) == (args, [])


def test_validate_json_before_a_checkpoint_folder_is_the_flag(tmp_path: Path) -> None:
    args = ["validate", "--json", str(tmp_path), "m.onnx"]
    assert rewrite_json_path(args) == (args, [])


def test_the_deprecation_warning_is_one_line_on_stderr(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    """Through main: the old form reaches the command as the new one (here: its usage error
    for a missing --model names no --json problem) after the one warning line."""
    code, out, err = run_main(monkeypatch, capsys, "loadtest", "--json", str(tmp_path / "r"))
    assert code == 2 and out == ""
    assert err[0] == f"warning: {JSON_PATH_WARNING}"
    assert len(err) == 2 and "Missing option '--model'" in err[1]
    assert not (tmp_path / "r").exists()
