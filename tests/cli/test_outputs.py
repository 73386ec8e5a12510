"""Outputs of export, package, validate and train, in process: an output that cannot be written,
or that would destroy an input or a checkpoint, is refused in one line before any work.

"Before any work" is checked by replacing the library function that does the work with one that
records its calls: a refused command never calls it.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from attndeploy.checkpoint import CONFIG_FILE, FORMAT, WEIGHTS_FILE
from attndeploy.cli import app as cli_app
from attndeploy.fsutil import file_sha256
from tests.serving.onnx_fixtures import build_model, fixture_vocab, save_model


def run_main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, *args: str):
    """`attndeploy ARGS` in process: (exit code, stdout, stderr lines)."""
    monkeypatch.setattr("sys.argv", ["attndeploy", *map(str, args)])
    with pytest.raises(SystemExit) as info:
        cli_app.main()
    captured = capsys.readouterr()
    return info.value.code, captured.out, captured.err.strip().splitlines()


def assert_refused(result, stage: str, *fragments: str) -> None:
    code, _, err = result
    assert code == 1, (code, err)
    assert len(err) == 1, err
    assert err[0].startswith(f"error ({stage}): "), err[0]
    for fragment in fragments:
        assert fragment in err[0], (fragment, err[0])


def fake_checkpoint(path: Path) -> Path:
    """A folder that looks like a checkpoint to the output checks (never loaded here)."""
    path.mkdir(parents=True)
    (path / CONFIG_FILE).write_text(json.dumps({"format": FORMAT, "format_version": 1}))
    (path / WEIGHTS_FILE).write_bytes(b"the weights")
    return path


@pytest.fixture
def exports(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Path, Path]]:
    """Replace the exporter: each call is recorded and writes a small file at its target."""
    from attndeploy.export import exporter

    calls: list[tuple[Path, Path]] = []

    def fake(checkpoint: Path, out: Path, options: object = None) -> SimpleNamespace:
        calls.append((Path(checkpoint), Path(out)))
        Path(out).write_bytes(b"onnx")
        return SimpleNamespace(to_json=lambda: {"path": str(out)})

    monkeypatch.setattr(exporter, "export_checkpoint", fake)
    return calls


# --------------------------------------------------------------------------- export


@pytest.mark.parametrize("name", [WEIGHTS_FILE, CONFIG_FILE, "."])
def test_export_refuses_to_write_over_its_own_checkpoint(
    monkeypatch, capsys, tmp_path, exports, name
):
    ckpt = fake_checkpoint(tmp_path / "ckpt")
    before = {p.name: file_sha256(p) for p in ckpt.iterdir()}
    result = run_main(monkeypatch, capsys, "export", ckpt, "--out", ckpt / name, "--force")
    assert_refused(result, "output", "cannot write")
    assert exports == []
    assert {p.name: file_sha256(p) for p in ckpt.iterdir()} == before


@pytest.mark.parametrize("where", ["other/model.onnx", "other/graph.onnx", "ckpt/sub/x.onnx",
                                   "ckpt/graph.onnx", "other/sub/deeper/x.onnx"])
def test_export_refuses_an_output_inside_a_checkpoint_directory(
    monkeypatch, capsys, tmp_path, exports, where
):
    ckpt = fake_checkpoint(tmp_path / "ckpt")
    fake_checkpoint(tmp_path / "other")
    result = run_main(monkeypatch, capsys, "export", ckpt, "--out", tmp_path / where)
    holder = tmp_path / where.split("/")[0]
    assert_refused(result, "output", f"inside the checkpoint directory {holder}",
                   "give --out outside it")
    assert exports == []
    assert not (tmp_path / where).exists()


def test_a_folder_whose_config_json_nests_deep_is_no_checkpoint_to_protect(tmp_path):
    """Looking for a checkpoint above --out reads each config.json there through the one JSON
    reader: one nested 100,000 levels deep is not a checkpoint, not a RecursionError."""
    from attndeploy.cli.export import checkpoint_holding

    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    assert checkpoint_holding(tmp_path / "c" / "m.onnx") is None
    holder = fake_checkpoint(tmp_path / "ckpt")
    assert checkpoint_holding(holder / "m.onnx") == holder.resolve()


def test_export_writes_the_default_beside_the_weights_and_replaces_it_only_with_force(
    monkeypatch, capsys, tmp_path, exports
):
    ckpt = fake_checkpoint(tmp_path / "ckpt")
    code, out, err = run_main(monkeypatch, capsys, "export", ckpt, "--json")
    assert code == 0, err
    assert json.loads(out)["path"] == str(ckpt / "model.onnx")
    assert_refused(run_main(monkeypatch, capsys, "export", ckpt), "output",
                   f"{ckpt / 'model.onnx'} already exists; pass --force to replace it")
    assert_refused(run_main(monkeypatch, capsys, "export", ckpt, "--out", ckpt / "model.onnx"),
                   "output", "already exists; pass --force")
    code, _, err = run_main(monkeypatch, capsys, "export", ckpt, "--force", "--json")
    assert code == 0, err
    assert exports == [(ckpt, ckpt / "model.onnx")] * 2


def test_export_refuses_an_existing_output_without_force(monkeypatch, capsys, tmp_path, exports):
    ckpt = fake_checkpoint(tmp_path / "ckpt")
    (tmp_path / "a.onnx").write_bytes(b"an earlier export")
    assert_refused(run_main(monkeypatch, capsys, "export", ckpt, "--out", tmp_path / "a.onnx"),
                   "output", "a.onnx already exists; pass --force to replace it")
    assert (tmp_path / "a.onnx").read_bytes() == b"an earlier export" and exports == []
    code, _, err = run_main(monkeypatch, capsys, "export", ckpt, "--out", tmp_path / "a.onnx",
                            "--force", "--json")
    assert code == 0, err
    assert (tmp_path / "a.onnx").read_bytes() == b"onnx"


@pytest.mark.parametrize("out, fragment", [
    ("folder", "it is a folder; give a file name"),
    ("/proc/attndeploy.onnx", "/proc is not writable"),
    ("blocker/model.onnx", "blocker is not a folder"),
    ("x" * 300 + ".onnx", "characters; keep it under"),
])
def test_export_refuses_an_unwritable_output_before_exporting(
    monkeypatch, capsys, tmp_path, exports, out, fragment
):
    ckpt = fake_checkpoint(tmp_path / "ckpt")
    (tmp_path / "folder").mkdir()
    (tmp_path / "blocker").write_text("a file")
    target = out if out.startswith("/") else tmp_path / out
    assert_refused(run_main(monkeypatch, capsys, "export", ckpt, "--out", target, "--force"),
                   "output", fragment)
    assert exports == []


def test_a_real_export_to_the_default_path_keeps_the_checkpoint_intact(
    monkeypatch, capsys, tmp_path
):
    from attndeploy.checkpoint import read_checkpoint, save_checkpoint
    from attndeploy.config import ModelConfig
    from attndeploy.export.exporter import read_metadata
    from attndeploy.models import build_model as build_torch_model

    config = ModelConfig(vocab_size=20, num_labels=2, d_model=8, n_heads=2, n_layers=1, d_ff=16,
                         max_seq=16, pool_hidden=4)
    ckpt = save_checkpoint(build_torch_model(config), tmp_path / "ckpt", label_names=("a", "b"))
    before = {p.name: file_sha256(p) for p in ckpt.iterdir()}
    code, out, err = run_main(monkeypatch, capsys, "export", ckpt, "--json")
    assert code == 0, err
    assert sorted(p.name for p in ckpt.iterdir()) == sorted([*before, "model.onnx"])
    assert {name: file_sha256(ckpt / name) for name in before} == before
    assert read_metadata(ckpt / "model.onnx")["weights_sha256"] == before[WEIGHTS_FILE]
    read_checkpoint(ckpt)  # still loads: config and weights agree


# --------------------------------------------------------------------------- package


@pytest.fixture
def onnx_file(tmp_path: Path) -> Path:
    return save_model(build_model(custom_op=True), tmp_path / "src" / "cls.onnx")


@pytest.mark.parametrize("repo, fragment", [
    ("a_file", "it is a file, not a folder"),
    ("/proc/attndeploy-repo", "/proc is not writable"),
])
def test_package_refuses_an_unwritable_repo_before_exporting(
    monkeypatch, capsys, tmp_path, exports, repo, fragment
):
    ckpt = fake_checkpoint(tmp_path / "ckpt")
    (tmp_path / "a_file").write_text("not a folder")
    target = repo if repo.startswith("/") else tmp_path / repo
    assert_refused(run_main(monkeypatch, capsys, "package", ckpt, "--repo", target),
                   "output", fragment)
    assert exports == []
    assert (tmp_path / "a_file").read_text() == "not a folder"


def test_package_refuses_an_empty_name(monkeypatch, capsys, tmp_path, onnx_file):
    result = run_main(monkeypatch, capsys, "package", onnx_file, "--repo", tmp_path / "repo",
                      "--model", "")
    assert_refused(result, "repository", "the model name is empty")
    assert not (tmp_path / "repo").exists()


@pytest.mark.parametrize(("flags", "call", "says"), [
    ((), "onnxruntime", "text model running cls's ONNX in its own process"),
    (("--text-bls",), "bls", "text model calling cls by BLS"),
])
def test_package_says_how_the_text_model_runs_its_id_model(monkeypatch, capsys, tmp_path, flags,
                                                           call, says):
    source = save_model(build_model(vocab=fixture_vocab(16)), tmp_path / "src" / "cls.onnx")
    code, out, err = run_main(monkeypatch, capsys, "package", source, "--repo",
                              tmp_path / "repo", *flags)
    assert code == 0, err
    assert says in " ".join(out.split())  # the console may wrap the line
    code, out, err = run_main(monkeypatch, capsys, "package", source, "--repo",
                              tmp_path / "repo", "--force", "--json", *flags)
    assert code == 0, err
    (text,) = [m for m in json.loads(out)["models"] if m["kind"] == "text"]
    assert (text["name"], text["id_model"], text["text_call"]) == ("cls_text", "cls", call)


def test_package_refuses_an_overlong_name_and_leaves_no_repository(
    monkeypatch, capsys, tmp_path, onnx_file
):
    result = run_main(monkeypatch, capsys, "package", onnx_file, "--repo", tmp_path / "repo",
                      "--model", "m" * 300, "--flavor", "both")
    assert_refused(result, "repository", "300 characters long; use at most 128")
    assert not (tmp_path / "repo").exists()


def test_package_names_the_force_flag_when_a_model_exists(
    monkeypatch, capsys, tmp_path, onnx_file
):
    repo = tmp_path / "repo"
    code, _, err = run_main(monkeypatch, capsys, "package", onnx_file, "--repo", repo)
    assert code == 0, err
    assert_refused(run_main(monkeypatch, capsys, "package", onnx_file, "--repo", repo),
                   "repository", "already exist; pass --force")


def test_package_then_check_repo_clean_up_after_a_killed_packager(
    monkeypatch, capsys, tmp_path, onnx_file
):
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    repo = tmp_path / "repo"
    code, _, err = run_main(monkeypatch, capsys, "package", onnx_file, "--repo", repo)
    assert code == 0, err
    staging = repo / f".other.{int(dead.stdout)}.k3j4h5g6.tmp"  # `package --force`, SIGKILLed
    staging.mkdir()
    (staging / "config.pbtxt").write_text("name: 'other'")
    code, out, _ = run_main(monkeypatch, capsys, "check-repo", repo, "--json")
    (finding,) = json.loads(out)["findings"]
    assert code == 1 and finding["severity"] == "error"
    assert f"staging folder {staging.name} was left by an interrupted write" in finding["message"]
    code, _, err = run_main(monkeypatch, capsys, "package", onnx_file, "--repo", repo,
                            "--model", "second")
    assert code == 0, err
    assert sorted(p.name for p in repo.iterdir()) == ["cls", "second"]
    code, out, err = run_main(monkeypatch, capsys, "check-repo", repo, "--json")
    assert code == 0 and json.loads(out)["passed"] is True, (out, err)


def test_check_repo_cuts_a_huge_unparsable_line_and_still_names_file_and_line(
    monkeypatch, capsys, tmp_path, onnx_file
):
    repo = tmp_path / "repo"
    code, _, err = run_main(monkeypatch, capsys, "package", onnx_file, "--repo", repo)
    assert code == 0, err
    config = repo / "cls" / "config.pbtxt"
    config.write_text(config.read_text() + "x" * 600_000 + "\n")  # one 600 KB junk line
    line = len(config.read_text().splitlines())
    code, out, err = run_main(monkeypatch, capsys, "check-repo", "--repo", repo)
    assert code == 1 and len(out) + len("".join(err)) < 2_000, (len(out), len("".join(err)))
    assert len(err) == 1 and f"{config} does not parse" in err[0] and f"{line}:1 :" in err[0]
    assert "x" * 100 in err[0] and "characters)" in err[0]  # the start, then its length
    code, out, _ = run_main(monkeypatch, capsys, "check-repo", "--repo", repo, "--json")
    (finding,) = json.loads(out)["findings"]
    assert len(out) < 2_000 and f"{line}:1 :" in finding["message"]


# --------------------------------------------------------------------------- validate


@pytest.fixture
def validations(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    from attndeploy.validate import validator

    calls: list[Path] = []

    def fake(checkpoint: Path, model: Path, options: object = None) -> None:
        calls.append(Path(model))
        raise AssertionError("validation ran although an output is unusable")

    monkeypatch.setattr(validator, "validate_model", fake)
    return calls


@pytest.mark.parametrize("flag, out, fragment", [
    ("--json-out", "/proc/attndeploy.json", "/proc is not writable"),
    ("--markdown", "/sys/attndeploy.md", "/sys is not writable"),
    ("--json-out", "folder", "it is a folder; give a file name"),
    ("--markdown", "blocker/report.md", "blocker is not a folder"),
    ("--json-out", "model.onnx", "it is an input of this command"),
    ("--markdown", "ckpt/config.json", "it is an input of this command"),
    ("--json-out", "ckpt/model.safetensors", "it is an input of this command"),
])
def test_validate_refuses_an_unusable_report_path_before_validating(
    monkeypatch, capsys, tmp_path, validations, flag, out, fragment
):
    ckpt = fake_checkpoint(tmp_path / "ckpt")
    (tmp_path / "model.onnx").write_bytes(b"onnx")
    (tmp_path / "folder").mkdir()
    (tmp_path / "blocker").write_text("a file")
    target = out if out.startswith("/") else tmp_path / out
    result = run_main(monkeypatch, capsys, "validate", ckpt, tmp_path / "model.onnx", flag,
                      target)
    assert_refused(result, "output", fragment)
    assert validations == []
    assert (ckpt / CONFIG_FILE).read_text().startswith("{") and (tmp_path / "model.onnx"
                                                                 ).read_bytes() == b"onnx"


def test_validate_refuses_the_same_file_for_both_reports(
    monkeypatch, capsys, tmp_path, validations
):
    ckpt = fake_checkpoint(tmp_path / "ckpt")
    (tmp_path / "model.onnx").write_bytes(b"onnx")
    result = run_main(monkeypatch, capsys, "validate", ckpt, tmp_path / "model.onnx",
                      "--json-out", tmp_path / "r", "--markdown", tmp_path / "r")
    assert_refused(result, "output", "--json-out and --markdown name the same file")
    assert validations == []


def test_validate_given_a_folder_as_the_model_says_an_onnx_file_is_expected(
    monkeypatch, capsys, tmp_path, validations
):
    ckpt = fake_checkpoint(tmp_path / "ckpt")
    assert_refused(run_main(monkeypatch, capsys, "validate", ckpt, tmp_path), "validation",
                   f"{tmp_path} is a folder; give the ONNX file exported from the checkpoint")
    (ckpt / "model.onnx").write_bytes(b"onnx")
    assert_refused(run_main(monkeypatch, capsys, "validate", ckpt, ckpt), "validation",
                   "is a folder", f"(did you mean {ckpt / 'model.onnx'}?)")
    assert validations == []


# ---------------------------------------------------------------- reports obey --force

# command line before the report option -> the report options it takes
REPORT_OPTIONS = {
    "validate": (["validate", "{ckpt}", "{onnx}"], ["--json-out", "--markdown"]),
    "debug": (["debug", "compare", "{ckpt}", "{onnx}"], ["--json-out", "--plot"]),
    "loadtest": (["loadtest", "--model", "m", "--url", "127.0.0.1:9"],
                 ["--json-out", "--csv", "--plot"]),
    "tune": (["tune", "--model", "m", "--repo", "{tmp}"], ["--json-out", "--plot"]),
}


@pytest.mark.parametrize("existing", ["file", "dangling link"])
@pytest.mark.parametrize("command, option", [
    (command, option) for command, (_, options) in REPORT_OPTIONS.items() for option in options])
def test_an_existing_report_is_replaced_only_with_force(monkeypatch, capsys, tmp_path, command,
                                                        option, existing):
    """Every file a command writes obeys --force, as checkpoints, ONNX files and repositories
    do: an existing report (a symbolic link too, even one to nothing) is refused before the
    work starts, and left as it was."""
    ckpt = fake_checkpoint(tmp_path / "ckpt")
    (tmp_path / "model.onnx").write_bytes(b"onnx")
    report = tmp_path / "old-report"
    if existing == "file":
        report.write_text("kept")
    else:
        report.symlink_to(tmp_path / "nowhere")
    values = {"ckpt": str(ckpt), "onnx": str(tmp_path / "model.onnx"), "tmp": str(tmp_path)}
    line = [arg.format(**values) for arg in REPORT_OPTIONS[command][0]]
    result = run_main(monkeypatch, capsys, *line, option, report)
    assert_refused(result, "output", f"{report} already exists; pass --force to replace it")
    if existing == "file":
        assert report.read_text() == "kept"
    else:
        assert report.is_symlink() and not (tmp_path / "nowhere").exists()
    code, _, err = run_main(monkeypatch, capsys, *line, option, report, "--force")
    assert not any("already exists" in line for line in err), err  # past the check (it fails
    # later for want of a real model or server, which is not this test's business)
