"""`attndeploy tune` from the command line, with a simulated measurement (no server): one-line
errors, the partial result and exit 130 of a Ctrl-C, --apply, and nothing written when no
candidate meets the latency budget."""

from __future__ import annotations

import json

import pytest

from attndeploy.cli import app as cli_app
from attndeploy.serving.packaging.check_repo import check_repository
from tests.serving.tune.fixtures import TEXT, Simulated, simulated_reference, tiny_repo

QUICK = ["--concurrency", "1,16", "--budget-minutes", "30"]


def run_main(monkeypatch, capsys, argv):
    monkeypatch.setattr("sys.argv", ["attndeploy", *argv])
    with pytest.raises(SystemExit) as info:
        cli_app.main()
    captured = capsys.readouterr()
    return info.value.code, captured.out, captured.err.strip().splitlines()


def files(folder):
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def simulated(monkeypatch):
    """The run's measurements and in-process reference simulated; its clock too."""
    simulated = Simulated()
    monkeypatch.setattr("attndeploy.serving.tune.run.find_tritonserver", lambda: None)
    monkeypatch.setattr("attndeploy.serving.tune.run.measure_candidate", simulated)
    monkeypatch.setattr("attndeploy.serving.tune.run.measure_in_process", simulated_reference)
    monkeypatch.setattr("attndeploy.serving.tune.run.time.monotonic", simulated.clock)
    return simulated


def test_tune_apply_writes_the_chosen_configuration_and_check_repo_accepts_it(
        tmp_path, monkeypatch, capsys, simulated):
    repo = tiny_repo(tmp_path)
    code, out, err = run_main(monkeypatch, capsys, [
        "tune", "--repo", str(repo), "--model", TEXT, *QUICK, "--apply",
        "--json-out", str(tmp_path / "tune.json"), "--plot", str(tmp_path / "tune.png")])
    assert code == 0, err
    data = json.loads((tmp_path / "tune.json").read_text())
    # the text model runs the ONNX itself (the package default): its config holds the choice
    assert data["applied"]["configs"][TEXT] == str(repo / TEXT / "config.pbtxt")
    assert (repo / TEXT / "config.pbtxt.previous").is_file()
    assert check_repository(repo).passed
    assert (tmp_path / "tune.png").stat().st_size > 0
    assert "Pareto front" in out and "applied:" in out


def test_tune_json_prints_one_document_and_applies_nothing_without_apply(
        tmp_path, monkeypatch, capsys, simulated):
    repo = tiny_repo(tmp_path)
    before = files(repo)
    code, out, _ = run_main(monkeypatch, capsys, ["tune", "--repo", str(repo), "--model", TEXT,
                                                  *QUICK, "--json"])
    assert code == 0
    assert json.loads(out)["chosen"]["name"]
    assert files(repo) == before


def test_ctrl_c_writes_the_partial_result_and_exits_130(tmp_path, monkeypatch, capsys,
                                                          simulated):
    simulated.interrupt_at = 3
    repo = tiny_repo(tmp_path)
    before = files(repo)
    code, _, err = run_main(monkeypatch, capsys, [
        "tune", "--repo", str(repo), "--model", TEXT, *QUICK, "--apply",
        "--json-out", str(tmp_path / "partial.json")])
    assert code == 130
    assert err[-1] == "error (attndeploy): interrupted"
    data = json.loads((tmp_path / "partial.json").read_text())
    assert data["partial"] is True and len(data["measurements"]) == 2
    assert files(repo) == before  # never applied


def test_no_candidate_within_the_budget_is_one_line_naming_the_closest_and_writes_nothing(
        tmp_path, monkeypatch, capsys, simulated):
    repo = tiny_repo(tmp_path)
    before = files(tmp_path)
    code, _, err = run_main(monkeypatch, capsys, [
        "tune", "--repo", str(repo), "--model", TEXT, *QUICK, "--latency-budget-ms", "0.01",
        "--apply", "--json-out", str(tmp_path / "t.json"), "--plot", str(tmp_path / "t.png")])
    assert code == 1 and len(err) == 1
    assert err[0].startswith("error (loadtest): no configuration kept p95 within 0.01 ms")
    assert "the closest was" in err[0]
    assert files(tmp_path) == before


@pytest.mark.parametrize(("argv", "stage", "fragment"), [
    (["--model", "nope"], "repository", "no model 'nope' in"),
    (["--model", TEXT, "--budget-minutes", "0.05"], "config", "shorter than one measurement"),
    (["--model", TEXT, "--concurrency", "16,4"], "config", "must rise"),
    (["--model", TEXT, "--int8", "{tmp}/missing.onnx"], "repository", "is not a file"),
    (["--model", TEXT, "--latency-budget-ms", "0"], "usage", "0 is not > 0"),
    (["--model", TEXT, "--concurrency", "1,0"], "usage", "0 is not an integer >= 1"),
    (["--model", TEXT, "--finalists", "0"], "usage", "--finalists"),
    (["--model", TEXT, "--json-out", "{tmp}"], "output", "folder"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys, argv, stage,
                                                  fragment):
    repo = tiny_repo(tmp_path)
    before = files(tmp_path)
    argv = [arg.format(tmp=tmp_path) for arg in argv]
    code, _, err = run_main(monkeypatch, capsys, ["tune", "--repo", str(repo), *argv])
    assert code == (2 if stage == "usage" else 1)
    assert len(err) == 1 and err[0].startswith(f"error ({stage}): "), err
    assert fragment in err[0]
    assert files(tmp_path) == before


def test_a_missing_tritonserver_is_a_server_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ATTNDEPLOY_TRITONSERVER", str(tmp_path / "no-such-tritonserver"))
    code, _, err = run_main(monkeypatch, capsys, ["tune", "--repo", str(tiny_repo(tmp_path)),
                                                  "--model", TEXT])
    assert code == 1 and len(err) == 1 and err[0].startswith("error (server): ")


def test_the_tune_options_default_to_the_library_s():
    import typer

    from attndeploy.cli.defaults import field_default, number_list
    from attndeploy.serving.packaging.options import DEFAULT_REPOSITORY
    from attndeploy.serving.tune.options import TuneOptions

    command = typer.main.get_command(cli_app.app).commands["tune"]
    cli = {p.name: getattr(p.default, "value", p.default) for p in command.params}
    assert cli["concurrency"] == number_list(field_default(TuneOptions, "concurrency"))
    assert cli["seq"] == number_list(field_default(TuneOptions, "seq_lengths"))
    assert cli["budget_minutes"] == field_default(TuneOptions, "budget_minutes")
    assert cli["window"] == field_default(TuneOptions, "window_s")
    assert cli["protocol"] == field_default(TuneOptions, "protocol")
    assert cli["finalists"] == field_default(TuneOptions, "finalists")
    assert cli["repo"] == DEFAULT_REPOSITORY
