"""`export --factory MODULE:FACTORY [--weights W]` and `validate --factory ...`: the table of bad
inputs (one `error (<stage>): ...` line, exit 1 or 2, nothing written), run with the assertion
helpers of `tests/test_bad_inputs.py`, then a model exported, reloaded and validated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from tests.cli import user_models
from tests.test_bad_inputs import BadInput, case, run_main, snapshot

MODEL = "tests.cli.user_models:build"


def _weights(edit=None):
    """A safetensors file of the regressor's state dict at {tmp}/w.safetensors, edited."""

    def prepare(tmp: Path, work: Path) -> None:
        state = {k: v.contiguous() for k, v in user_models.Regressor().state_dict().items()}
        if edit is not None:
            edit(state)
        save_file(state, str(tmp / "w.safetensors"))

    return prepare


def _drop_and_add(state: dict) -> None:
    state.pop("head.bias")
    state["extra.weight"] = torch.zeros(1)


def _reshape(state: dict) -> None:
    state["proj.weight"] = torch.zeros(4, 4)


def _write(name: str, content: bytes | str):
    def prepare(tmp: Path, work: Path) -> None:
        data = content.encode() if isinstance(content, str) else content
        (tmp / name).write_bytes(data)

    return prepare


def _tiny_onnx(tmp: Path, work: Path) -> None:
    """{tmp}/m.onnx, a valid ONNX file (which model it is does not matter to these cases)."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    onnx.save(helper.make_model(graph), tmp / "m.onnx")


def _both(*prepares):
    def prepare(tmp: Path, work: Path) -> None:
        for each in prepares:
            each(tmp, work)

    return prepare


OUT = ("--out", "{tmp}/m.onnx")
CASES: dict[str, BadInput] = {
    "not module:factory": case("export", "--factory", "tests.cli.user_models", *OUT,
                               stage="export", fragment="must be MODULE:FACTORY"),
    "module not importable": case("export", "--factory", "no_such_pkg.models:build", *OUT,
                                  stage="export", fragment="no module named 'no_such_pkg'"),
    "module raises on import": case("export", "--factory", "broken_on_import:build", *OUT,
                                    stage="export", fragment="importing broken_on_import failed",
                                    prepare=_write("broken_on_import.py", "raise ValueError(1)")),
    "no such factory": case("export", "--factory", "tests.cli.user_models:nope", *OUT,
                            stage="export", fragment="has no 'nope'"),
    "factory not callable": case("export", "--factory", "tests.cli.user_models:not_callable",
                                 *OUT, stage="export", fragment="not a function"),
    "factory raises": case("export", "--factory", "tests.cli.user_models:raises", *OUT,
                           stage="export", fragment="RuntimeError: no GPU here"),
    "factory returns a module only": case(
        "export", "--factory", "tests.cli.user_models:returns_module_only", *OUT, stage="export",
        fragment="must return (module, inputs)"),
    "factory returns no module": case(
        "export", "--factory", "tests.cli.user_models:returns_not_a_module", *OUT, stage="export",
        fragment="not a torch.nn.Module"),
    "factory inputs not a dict": case(
        "export", "--factory", "tests.cli.user_models:returns_bad_inputs", *OUT, stage="export",
        fragment="non-empty dict"),
    "factory dynamic shapes malformed": case(
        "export", "--factory", "tests.cli.user_models:returns_bad_dynamic", *OUT, stage="export",
        fragment="dynamic_shapes must be"),
    "model fails on its inputs": case(
        "export", "--factory", "tests.cli.user_models:fails_forward", *OUT, stage="export",
        fragment="running the model on its example inputs failed"),
    "weights missing": case("export", "--factory", MODEL, "--weights", "{tmp}/absent.safetensors",
                            *OUT, stage="export", fragment="absent.safetensors does not exist"),
    "weights corrupt": case("export", "--factory", MODEL, "--weights", "{tmp}/w.safetensors", *OUT,
                            stage="export", fragment="not a readable safetensors file",
                            prepare=_write("w.safetensors", b"\x08\x00\x00garbage")),
    "weights names mismatch": case(
        "export", "--factory", MODEL, "--weights", "{tmp}/w.safetensors", *OUT, stage="export",
        fragment="1 missing: head.bias; 1 unexpected: extra.weight",
        prepare=_weights(_drop_and_add)),
    "weights shape mismatch": case(
        "export", "--factory", MODEL, "--weights", "{tmp}/w.safetensors", *OUT, stage="export",
        fragment="wrong shape: proj.weight [4, 4] (model [8, 3])", prepare=_weights(_reshape)),
    "model with a checkpoint": case("export", "{tmp}", "--factory", MODEL, *OUT, stage="export",
                                    fragment="a checkpoint argument"),
    "model with fp16": case("export", "--factory", MODEL, "--fp16", *OUT, stage="export",
                            fragment="--fp16 applies to a checkpoint only"),
    "model without out": case("export", "--factory", MODEL, stage="export",
                              fragment="--factory needs --out"),
    "neither checkpoint nor model": case("export", *OUT, stage="export",
                                         fragment="give a checkpoint directory, or --factory"),
    "weights without model": case("export", "{tmp}", "--weights", "{tmp}/w.safetensors", *OUT,
                                  stage="export", fragment="--weights goes with --factory",
                                  prepare=_weights()),
    "out over the weights": case("export", "--factory", MODEL, "--weights", "{tmp}/w.safetensors",
                                 "--out", "{tmp}/w.safetensors", "--force", stage="output",
                                 fragment="it is an input of this command",
                                 prepare=_weights()),
    "out exists": case("export", "--factory", MODEL, *OUT, stage="output",
                       fragment="already exists", prepare=_write("m.onnx", "old")),
    "bad opset": case("export", "--factory", MODEL, "--opset", "7", *OUT, stage="export",
                      fragment="opset 7 is not supported"),
    # ---- validate --factory
    "validate model with two arguments": case(
        "validate", "--factory", MODEL, "{tmp}", "{tmp}/m.onnx", stage="validation",
        fragment="give one argument, the ONNX file"),
    "validate model missing onnx": case("validate", "--factory", MODEL, "{tmp}/absent.onnx",
                                        stage="validation", fragment="does not exist"),
    "validate model corrupt onnx": case("validate", "--factory", MODEL, "{tmp}/m.onnx",
                                        stage="validation", fragment="not an ONNX model",
                                        prepare=_write("m.onnx", b"\xff\xfe junk")),
    "validate model with shapes": case("validate", "--factory", MODEL, "{tmp}/m.onnx", "--shapes",
                                       "1x2", stage="validation", fragment="--shapes (BxS)"),
    "validate model weights mismatch": case(
        "validate", "--factory", MODEL, "--weights", "{tmp}/w.safetensors", "{tmp}/m.onnx",
        stage="validation", fragment="wrong shape: proj.weight",
        prepare=_both(_weights(_reshape), _tiny_onnx)),
    "validate model factory raises": case(
        "validate", "--factory", "tests.cli.user_models:raises", "{tmp}/m.onnx",
        stage="validation", fragment="no GPU here", prepare=_tiny_onnx),
    "validate json-out over the weights": case(
        "validate", "--factory", MODEL, "--weights", "{tmp}/w.safetensors", "{tmp}/m.onnx",
        "--json-out", "{tmp}/w.safetensors", stage="output",
        fragment="it is an input of this command",
        prepare=_both(_weights(), _write("m.onnx", "x"))),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_user_model_input_is_one_line_error_and_writes_nothing(name, tmp_path, monkeypatch,
                                                                  capsys):
    bad = CASES[name]
    if bad.prepare is not None:
        bad.prepare(tmp_path, tmp_path)
    monkeypatch.chdir(tmp_path)  # where a user's own module file lives
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2]))  # `tests.` importable
    argv = [arg.format(tmp=str(tmp_path)) for arg in bad.argv]
    before = snapshot(tmp_path)
    code, out, err = run_main(monkeypatch, capsys, argv)
    assert "Traceback" not in out + "\n".join(err)
    assert code == bad.exit_code, (code, err)
    assert len(err) == 1, err
    assert err[0].startswith(f"error ({bad.stage}): "), err[0]
    assert bad.fragment.lower() in err[0].lower(), err[0]
    assert snapshot(tmp_path) == before


def test_exported_with_weights_the_onnx_reproduces_them_and_validates(tmp_path, monkeypatch,
                                                                     capsys):
    import numpy as np
    import onnxruntime as ort

    trained = user_models.Regressor()  # other weights than build()'s seed-0 ones
    with torch.no_grad():
        for parameter in trained.parameters():
            parameter.add_(0.5)
    save_file({k: v.contiguous() for k, v in trained.state_dict().items()},
              str(tmp_path / "w.safetensors"))
    code, out, err = run_main(monkeypatch, capsys, ["export", "--factory", MODEL, "--weights",
                                                    str(tmp_path / "w.safetensors"), "--out",
                                                    str(tmp_path / "m.onnx"), "--json"])
    assert code == 0, err
    result = json.loads(out)
    assert result["custom_nodes"] == {"EvolvingAttentionStart": 1}
    assert result["inputs"] == ["features", "mask"] and result["outputs"] == ["value", "states"]
    feed = {k: v.numpy() for k, v in user_models.example_inputs().items()}
    session = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    (value,) = session.run(["value"], feed)
    with torch.no_grad():
        want = trained.eval()(**user_models.example_inputs())["value"].numpy()
    np.testing.assert_allclose(value, want, rtol=1e-4, atol=1e-5)
    code, out, err = run_main(monkeypatch, capsys, [
        "validate", "--factory", MODEL, "--weights", str(tmp_path / "w.safetensors"),
        str(tmp_path / "m.onnx"), "--json"])
    assert code == 0, err
    report = json.loads(out)
    assert report["passed"] is True
    assert len(report["shapes"]) == 4  # the example, all dims at 1, all grown, batch 1 grown
    code, out, err = run_main(monkeypatch, capsys, [  # without the weights: another model
        "validate", "--factory", MODEL, str(tmp_path / "m.onnx"), "--json"])
    assert code == 1 and json.loads(out)["passed"] is False
    assert err[-1].startswith("error (validation): validation failed"), err
