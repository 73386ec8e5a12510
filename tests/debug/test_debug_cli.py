"""`attndeploy debug compare` as a person runs it: the table, the verdict, JSON and plot, the exit
code, and one line for every bad input with nothing written."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from attndeploy.cli import app as cli_app
from tests.debug.conftest import plant_in_body

pytestmark = pytest.mark.usefixtures("torch_defaults")


def run_main(monkeypatch, capsys, *argv: str) -> tuple[int, str, list[str]]:
    monkeypatch.setattr("sys.argv", ["attndeploy", *argv])
    with pytest.raises(SystemExit) as info:
        cli_app.main()
    captured = capsys.readouterr()
    return info.value.code, captured.out, captured.err.strip().splitlines()


@pytest.fixture(scope="module")
def work(models, tmp_path_factory) -> dict[str, Path]:
    """The evolving checkpoint, its export, a planted copy, an int8 copy and another model."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    folder = tmp_path_factory.mktemp("debug_cli")
    clean = models.get("evolving")
    plant_in_body(clean.path, folder / "planted.onnx", 1)
    logging.getLogger().setLevel(logging.ERROR)
    quantize_dynamic(str(clean.path), str(folder / "int8.onnx"), weight_type=QuantType.QInt8)
    (folder / "plain.onnx").write_bytes(b"not a model")
    return {"ckpt": clean.checkpoint, "onnx": clean.path, "planted": folder / "planted.onnx",
            "int8": folder / "int8.onnx", "qvi": models.get("qvi_pooled").path,
            "plain": folder / "plain.onnx"}


def test_a_planted_bug_exits_1_with_the_verdict_after_writing_json_and_plot(
        work, tmp_path, monkeypatch, capsys):
    code, out, err = run_main(monkeypatch, capsys, "debug", "compare", str(work["ckpt"]),
                              str(work["planted"]), "--json-out", str(tmp_path / "r.json"),
                              "--plot", str(tmp_path / "r.png"))
    assert code == 1
    assert err == [f"error (validation): first divergence: layer 1 (EvolvingAttention), inside "
                   f"its function at node `n1__1` (Constant), error 5.5e-1 against the "
                   f"tolerance 1e-5; report: {tmp_path / 'r.json'}"]
    assert "FIRST" in out and "adds the most error: layer 1" in out
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["first_divergence"] == {"kind": "node", "label": "layer 1", "index": 1}
    assert report["inside"]["first_body_node"]["name"] == "n1__1"
    assert (tmp_path / "r.png").read_bytes().startswith(b"\x89PNG")


def test_a_ctrl_c_while_writing_the_reports_leaves_neither_and_a_rerun_needs_no_force(
        work, tmp_path, monkeypatch, capsys):
    from attndeploy.debug.report import DebugReport

    argv = ["debug", "compare", str(work["ckpt"]), str(work["onnx"]), "--json-out",
            str(tmp_path / "r.json"), "--plot", str(tmp_path / "r.png")]
    with monkeypatch.context() as patch:
        def ctrl_c(self, path):  # after the JSON, before the plot
            raise KeyboardInterrupt

        patch.setattr(DebugReport, "write_plot", ctrl_c)
        code, _, err = run_main(monkeypatch, capsys, *argv)
    assert code == 130 and err == ["error (attndeploy): interrupted"]
    assert list(tmp_path.iterdir()) == []
    code, _, err = run_main(monkeypatch, capsys, *argv)
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "r.png"]


def test_a_clean_export_exits_0_and_json_is_the_only_thing_on_stdout(work, monkeypatch,
                                                                      capsys):
    code, out, err = run_main(monkeypatch, capsys, "debug", "compare", str(work["ckpt"]),
                              str(work["onnx"]), "--json")
    assert code == 0 and err == []
    assert json.loads(out)["passed"] is True


def test_against_compares_two_onnx_files_without_a_checkpoint(work, monkeypatch, capsys):
    code, out, err = run_main(monkeypatch, capsys, "debug", "compare", str(work["int8"]),
                              "--against", str(work["onnx"]), "--json")
    assert code == 1 and len(err) == 1 and "first divergence: layer 0" in err[0]
    report = json.loads(out)
    assert report["reference"] == str(work["onnx"]) and report["candidate"] == str(work["int8"])
    assert report["ranked"][0]["added_error"] > 0


@pytest.mark.parametrize(("argv", "stage", "fragment"), [
    (["{ckpt}", "{tmp}/missing.onnx"], "validation", "does not exist"),
    (["{tmp}/nockpt", "{onnx}"], "checkpoint", "does not exist"),
    (["{onnx}", "--against", "{plain}"], "validation", "is not a readable ONNX file"),
    (["{onnx}", "--against", "{qvi}"], "validation", "are not the same model"),
    (["{ckpt}", "{onnx}", "--shapes", "2x99"], "validation",
     "exceed the maximum sequence length 16"),
    (["{ckpt}", "{onnx}", "--json-out", "{onnx}"], "output", "it is an input of this command"),
    (["{ckpt}", "{onnx}", "--json-out", "{tmp}/r", "--plot", "{tmp}/r"], "output",
     "--json-out and --plot name the same file"),
    (["{onnx}"], "validation", "give a checkpoint directory and its ONNX file"),
    (["{ckpt}", "{onnx}", "--weights", "{onnx}"], "validation", "--weights goes with --factory"),
    (["--factory", "nowhere:build", "{onnx}"], "validation", "no module named 'nowhere'"),
])
def test_bad_input_is_one_line_and_writes_nothing(work, tmp_path, monkeypatch, capsys, argv,
                                                  stage, fragment):
    values = {**{k: str(v) for k, v in work.items()}, "tmp": str(tmp_path)}
    before = {p: p.read_bytes() for p in work.values() if p.is_file()}
    code, out, err = run_main(monkeypatch, capsys, "debug", "compare",
                              *(a.format(**values) for a in argv))
    assert code == 1
    assert len(err) == 1 and err[0].startswith(f"error ({stage}): "), err
    assert fragment in err[0]
    assert list(tmp_path.iterdir()) == []
    assert {p: p.read_bytes() for p in before} == before


def test_an_unknown_action_is_a_usage_error(monkeypatch, capsys):
    code, _, err = run_main(monkeypatch, capsys, "debug", "bisect", "x.onnx")
    assert code == 2 and len(err) == 1 and "'bisect' is not one of 'compare'" in err[0]


def test_the_cli_defaults_are_the_librarys():
    import typer

    from attndeploy.cli.defaults import parameter_default
    from attndeploy.debug import compare_checkpoint

    command = typer.main.get_command(cli_app.app).commands["debug"]
    cli = {p.name: p.default for p in command.params}
    assert cli["shapes"] == parameter_default(compare_checkpoint, "shapes")
    assert cli["seed"] == parameter_default(compare_checkpoint, "seed")
