"""`debug compare` of two decoder exports (attndeploy.debug.decoder_compare): logits and cache
per decode step, the layer where a difference starts ranked first, reports written, one clear
line for what a decoder cannot take."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from attndeploy.debug.decoder_compare import compare_decoders
from attndeploy.errors import ValidationError
from attndeploy.quantize import QuantizeOptions, quantize_model
from tests.debug.test_debug_cli import run_main
from tests.quantize.decoders import DECODER_PARAMS

STEPS = 3


def plant_in_layer(source, target, layer: int) -> None:
    """A copy of `source` with the attention biases of block `layer` moved: that layer's cache
    and everything after it differ, nothing before it."""
    model = onnx.load(str(source))
    rng = np.random.default_rng(0)
    for tensor in model.graph.initializer:
        if tensor.name.startswith(f"model.blocks.{layer}.attention.") and "bias" in tensor.name:
            values = onnx.numpy_helper.to_array(tensor)
            tensor.CopyFrom(onnx.numpy_helper.from_array(
                (values + rng.normal(0, 0.5, values.shape)).astype(np.float32), tensor.name))
    onnx.save(model, str(target))


@pytest.mark.parametrize("name", DECODER_PARAMS)
def test_a_decoder_against_itself_agrees_exactly_at_every_step(decoder_exports, name):
    path = decoder_exports.get(name)
    report = compare_decoders(path, path, steps=STEPS)
    assert report.passed and report.first_divergence is None
    assert [s.step for s in report.steps] == list(range(STEPS + 1))
    assert all(s.logits.max_abs == 0 and s.same_token == 1.0 for s in report.steps)
    assert set(report.steps[0].state) == {e.present for e in _state(path)}


def _state(path):
    from attndeploy.generation.loop import DecoderModel

    return DecoderModel(path).metadata.state


def test_a_difference_planted_in_layer_1_is_found_there_and_layer_0_is_exact(
        decoder_exports, tmp_path):
    source = decoder_exports.get("standard")
    plant_in_layer(source, tmp_path / "planted.onnx", 1)
    report = compare_decoders(source, tmp_path / "planted.onnx", steps=STEPS)
    assert not report.passed
    assert report.first_divergence[0] == 0 and report.first_divergence[1].startswith("present.1.")
    layers = {layer.layer: layer for layer in report.layers()}
    assert layers["0"].rel_error == [0.0] * (STEPS + 1)
    assert min(layers["1"].rel_error) > 1e-3
    assert report.ranked()[0].layer == "1"
    assert all(s.logits.max_abs > 0 for s in report.steps)


def test_int8_against_fp32_from_the_cli_writes_json_and_plot_and_exits_1(
        decoder_exports, tmp_path, monkeypatch, capsys):
    source = decoder_exports.get("ganet-mlp")
    int8 = tmp_path / "int8.onnx"
    quantize_model(source, int8, QuantizeOptions(prompts=2, new_tokens=2)).raise_for_failure()
    code, out, err = run_main(monkeypatch, capsys, "debug", "compare", str(int8), "--against",
                              str(source), "--decode-steps", "2", "--shapes", "3x5", "--json-out",
                              str(tmp_path / "r.json"), "--plot", str(tmp_path / "r.png"))
    assert code == 1 and len(err) == 1 and "first divergence: present." in err[0], err
    record = json.loads((tmp_path / "r.json").read_text())
    assert record["schema"] == "attndeploy-debug-compare-decoder" and not record["passed"]
    assert record["shape"] == [3, 5] and len(record["steps"]) == 3
    assert {layer["layer"] for layer in record["layers"]} == {"0", "1"}
    assert sorted(record["ranked"]) == ["0", "1"]
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"
    assert "cache error grows the most in layer(s)" in out
    assert 0 < record["steps"][0]["logits"]["max_abs"] < 0.1


@pytest.mark.parametrize(("argv", "fragment"), [
    (["{ckpt}", "{decoder}"], "is a decoder: compare two decoder exports with"),
    (["{decoder}", "--against", "{encoder}"], "one is a decoder (text-generation) and the other"),
    (["{encoder}", "--against", "{encoder}", "--decode-steps", "2"],
     "--decode-steps is for decoders"),
    (["{decoder}", "--against", "{decoder}", "--shapes", "2x30"], "beyond the model's context"),
    (["{decoder}", "--against", "{decoder}", "--shapes", "2x3,4x5"], "a decoder takes one BxS"),
])
def test_bad_decoder_input_is_one_line_and_writes_nothing(
        decoder_exports, models, tmp_path, monkeypatch, capsys, argv, fragment):
    encoder = models.get("standard")
    values = {"decoder": str(decoder_exports.get("standard")), "encoder": str(encoder.path),
              "ckpt": str(encoder.checkpoint)}
    out = tmp_path / "out"
    out.mkdir()
    code, _, err = run_main(monkeypatch, capsys, "debug", "compare",
                            *(a.format(**values) for a in argv), "--json-out",
                            str(out / "r.json"))
    assert code == 1 and len(err) == 1 and err[0].startswith("error (validation): "), err
    assert fragment in err[0]
    assert list(out.iterdir()) == []


def test_two_different_decoders_are_refused(decoder_exports):
    with pytest.raises(ValidationError, match="not the same decoder"):
        compare_decoders(decoder_exports.get("standard"), decoder_exports.get("ganet-mlp"))
