"""The entry point `attndeploy.cli.app.main`, in process: every error is one line on stderr and
an exit code (usage 2, attndeploy errors 1), --help and success exit 0."""

from __future__ import annotations

import pytest

from attndeploy.cli import app as cli_app


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
