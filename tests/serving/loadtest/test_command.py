"""The `loadtest` command with a faked server: partial outputs, Ctrl-C, --json forms, bad paths."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from attndeploy.cli import app as cli_app
from tests.serving.loadtest.fakes import CountingClient, fake_server


def run_cli_main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture,
                 *args: str) -> tuple[int, str, list[str]]:
    monkeypatch.setattr("sys.argv", ["attndeploy", "loadtest", "--model", "m", *args])
    with pytest.raises(SystemExit) as info:
        cli_app.main()
    captured = capsys.readouterr()
    return info.value.code, captured.out, captured.err.strip().splitlines()


CLI_DYING = ["--concurrency", "1", "--window", "0.2", "--max-windows", "10",
             "--warmup-requests", "5",
             "--seq", "4"]


def test_the_command_writes_a_partial_json_when_the_server_dies(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)  # no model_repository here: no ONNX checks
    client = CountingClient()
    client.dead_after = 60
    fake_server(monkeypatch, client)
    code, _, err = run_cli_main(monkeypatch, capsys, *CLI_DYING, "--json-out", "out/report.json")
    assert code == 1
    assert err[-1].startswith("error (server): ") and "stopped answering" in err[-1]
    assert "Traceback" not in "\n".join(err)
    body = json.loads((tmp_path / "out" / "report.json").read_text())
    assert body["partial"] is True and body["passed"] is False
    assert "stopped answering" in body["partial_reason"]
    assert [lv["stop_reason"] for lv in body["levels"]] == ["aborted"]


def test_the_command_prints_a_partial_json_to_stdout_when_the_server_dies(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    client = CountingClient()
    client.dead_after = 60
    fake_server(monkeypatch, client)
    code, out, err = run_cli_main(monkeypatch, capsys, *CLI_DYING, "--json")
    assert code == 1 and len(err) == 1 and err[0].startswith("error (server): ")
    assert json.loads(out)["partial"] is True  # stdout holds the one JSON document


class InterruptedClient(CountingClient):
    """A Ctrl-C while the load tester issues its `interrupt_at`-th request."""

    def __init__(self, interrupt_at: int) -> None:
        super().__init__()
        self.interrupt_at = interrupt_at

    def async_infer(self, model: str, inputs: Any, callback: Any, **kwargs: Any) -> None:
        if self.issued + 1 >= self.interrupt_at:
            raise KeyboardInterrupt
        super().async_infer(model, inputs, callback, **kwargs)


@pytest.mark.parametrize("ending", ["server-dies", "ctrl-c"])
def test_a_test_ended_part_way_writes_its_csv_plot_and_json_with_what_was_measured(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, tmp_path: Path, ending: str
) -> None:
    monkeypatch.chdir(tmp_path)
    if ending == "server-dies":
        client: CountingClient = CountingClient()
        client.dead_after = 60
    else:
        client = InterruptedClient(interrupt_at=60)
    fake_server(monkeypatch, client)
    code, _, err = run_cli_main(monkeypatch, capsys, *CLI_DYING, "--json-out", "out/r.json",
                                "--csv", "out/r.csv", "--plot", "out/r.png")
    expected = (1, "error (server): ") if ending == "server-dies" else (
        130, "error (attndeploy): interrupted")
    assert (code, err[-1][: len(expected[1])]) == expected, err
    body = json.loads((tmp_path / "out" / "r.json").read_text())
    assert body["partial"] is True
    with (tmp_path / "out" / "r.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len(body["levels"]) == 1  # the aborted level, as measured
    assert (tmp_path / "out" / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_report_files_are_written_all_or_none(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    from attndeploy.serving.loadtest.report import LoadTestReport

    def full_disk(self: LoadTestReport, path: Path) -> Path:
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(LoadTestReport, "write_plot", full_disk)
    client = CountingClient()
    client.dead_after = 60
    fake_server(monkeypatch, client)
    code, _, err = run_cli_main(monkeypatch, capsys, *CLI_DYING, "--json-out", "out/r.json",
                                "--csv", "out/r.csv", "--plot", "out/r.png")
    assert code == 1 and err[-1].startswith("error (server): "), err
    assert "the partial report could not be written: cannot write out/r.png: No space" in err[0]
    assert list(tmp_path.iterdir()) == []  # neither the JSON nor the CSV, nor out/


@pytest.mark.parametrize(("old", "new"), [(["--json", "-"], ["--json"]),
                                          (["--json", "r.json"], ["--json-out", "r.json"]),
                                          (["--json=r.json"], ["--json-out", "r.json"])])
def test_the_old_json_path_forms_still_work_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, tmp_path: Path,
    old: list[str], new: list[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    outcomes = []
    for args in (old, new):
        client = CountingClient()
        client.dead_after = 60
        fake_server(monkeypatch, client)
        code, out, err = run_cli_main(monkeypatch, capsys, *CLI_DYING, *args)
        written = tmp_path / "r.json"
        body = json.loads(written.read_text() if "--json-out" in new else out)
        written.unlink(missing_ok=True)
        outcomes.append((code, body["partial"], err[-1].split(":")[0]))
        if args is old:
            assert err[0] == "warning: --json PATH is deprecated; use --json-out PATH"
        else:
            assert not any(line.startswith("warning") for line in err)
    assert outcomes[0] == outcomes[1] == (1, True, "error (server)")


def test_json_and_json_out_together_print_and_write_the_same_report(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    fake_server(monkeypatch, CountingClient())
    code, out, _ = run_cli_main(monkeypatch, capsys, "--concurrency", "1", "--window", "0.1",
                                "--max-windows", "3", "--warmup-requests", "2", "--seq", "4",
                                "--json",
                                "--json-out", "r.json")
    assert code == 0
    assert json.loads(out) == json.loads((tmp_path / "r.json").read_text())


def test_the_table_fits_80_columns_and_says_what_was_checked_and_noted(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    from attndeploy.cli import loadtest as loadtest_cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(loadtest_cli.console, "width", 80)
    fake_server(monkeypatch, CountingClient())
    code, out, err = run_cli_main(monkeypatch, capsys, "--concurrency", "1,16", "--window",
                                  "0.1", "--max-windows", "3", "--warmup-requests", "2",
                                  "--seq", "4")
    assert code == 0, err
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    header = next(line for line in lines if "infer/s" in line)
    assert header.split() == ["level", "infer/s", "p50", "p95", "p99", "errors", "batch",
                              "stable", "checked"]
    rows = [line.split() for line in lines  # not a warning such as "concurrency 16: not ..."
            if line.split()[:1] == ["concurrency"] and line.split()[1].isdigit()]
    assert [row[:2] for row in rows] == [["concurrency", "1"], ["concurrency", "16"]]
    assert [row[-1] for row in rows] == ["-", "-"]  # no ONNX file: nothing checked
    assert "no onnx_path given: responses were not checked" in " ".join(out.split())


@pytest.mark.parametrize("option", ["--json-out", "--csv", "--plot"])
@pytest.mark.parametrize("where", ["under-proc", "a-folder"])
def test_unusable_output_paths_fail_before_the_load_test(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, tmp_path: Path,
    option: str, where: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    fake_server(monkeypatch, None)  # connecting would fail the test
    path = "/proc/attndeploy/report.out" if where == "under-proc" else str(tmp_path)
    code, _, err = run_cli_main(monkeypatch, capsys, "--concurrency", "1", option, path)
    assert code == 1
    assert len(err) == 1 and err[0].startswith(f"error (output): cannot write {path}"), err
