"""`quantize_model` and `attndeploy quantize`: int8 models that keep the attndeploy nodes, their
functions and the metadata, checked against fp32, written only within the tolerances."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest

from attndeploy.errors import ConfigError, DataError, QuantizeError
from attndeploy.quantize import QuantizeOptions, quantize_model
from attndeploy.quantize.quantizer import gate_network_matmuls
from attndeploy.runtime import InferenceModel
from tests.cli.test_train_cli import assert_one_line_error, parse_json, run_cli
from tests.runtime.conftest import TEXTS

from .conftest import labelled_texts

CASES = ("standard", "qvi_pooled", "ganet_mlp", "evolving")


def quantization_record(path: Path) -> dict:
    return json.loads({p.key: p.value for p in onnx.load(str(path)).metadata_props}
                      ["attndeploy.quantization"])


def fp32_matmuls(path: Path) -> set[str]:
    return {n.name for n in onnx.load(str(path)).graph.node if n.op_type == "MatMul"}


def attndeploy_nodes(model: onnx.ModelProto) -> Counter:
    return Counter(n.op_type for n in model.graph.node if n.domain == "attndeploy")


@pytest.mark.parametrize("case", CASES)
def test_int8_keeps_the_attndeploy_nodes_functions_and_metadata_and_stays_close(
    text_exports, tmp_path: Path, case: str
):
    source = text_exports.get(case).path
    result = quantize_model(source, tmp_path / "int8.onnx", QuantizeOptions(threads=1))
    assert result.passed and result.chosen.method == "dynamic"
    fp32, int8 = onnx.load(str(source)), onnx.load(str(tmp_path / "int8.onnx"))
    assert attndeploy_nodes(int8) == attndeploy_nodes(fp32)
    assert [f.name for f in int8.functions] == [f.name for f in fp32.functions]
    kinds = Counter(n.op_type for n in int8.graph.node)
    assert kinds["MatMulInteger"] == result.chosen.quantized_nodes > 0
    meta = {p.key: p.value for p in int8.metadata_props}
    assert {p.key: p.value for p in fp32.metadata_props}.items() <= meta.items()
    record = json.loads(meta["attndeploy.quantization"])
    assert record["method"] == "dynamic" and record["per_channel"] is True
    assert record["activations"] == "per-row"  # the default: answers independent of the batch
    assert kinds["DynamicQuantizeLinear"] == 0
    assert result.chosen.grid.max_logit_change < 0.5
    assert result.chosen.size_bytes < (tmp_path / "int8.onnx").stat().st_size + 1
    predictions = InferenceModel(tmp_path / "int8.onnx", threads=1).predict(TEXTS[:5])
    assert len(predictions) == 5 and all(p.label for p in predictions)  # predict takes it


def test_labelled_texts_give_agreement_and_accuracy_and_static_is_calibrated_on_them(
    text_exports, tmp_path: Path
):
    source = text_exports.get("qvi_pooled").path
    data = labelled_texts(tmp_path / "held_out.jsonl", source, wrong=4)
    result = quantize_model(source, tmp_path / "int8.onnx",
                            QuantizeOptions(method="best", threads=1, min_agreement=0.5,
                                            max_accuracy_drop=0.5), data=data)
    assert [c.method for c in result.candidates] == ["dynamic", "static"]
    dynamic, static_candidate = result.candidates
    assert dynamic.quantized_nodes == static_candidate.quantized_nodes > 0  # the same MatMuls
    for candidate in result.candidates:
        checked = candidate.data
        assert checked.texts == len(TEXTS)
        assert checked.fp32_accuracy == pytest.approx(1 - 4 / len(TEXTS))
        assert 0.5 <= checked.label_agreement <= 1.0
    written = onnx.load(str(tmp_path / "int8.onnx"))
    if result.chosen.method == "static":
        assert any(n.op_type == "QuantizeLinear" for n in written.graph.node)
    else:  # best's dynamic file scales per row, as dynamic's does
        assert not any(n.op_type == "DynamicQuantizeLinear" for n in written.graph.node)
    assert result.chosen in result.candidates
    report = json.loads(json.dumps(result.to_dict()))
    assert report["written"] is True and report["options"]["activations"] == "per-row"


def test_outside_a_tolerance_nothing_is_written_and_the_numbers_say_why(text_exports,
                                                                        tmp_path: Path):
    source = text_exports.get("evolving").path
    out = tmp_path / "int8.onnx"
    result = quantize_model(source, out, QuantizeOptions(threads=1, max_logit_change=1e-9))
    assert not result.passed and not out.exists()
    assert list(tmp_path.iterdir()) == []  # no temporary left either
    assert "largest logit change" in result.candidates[0].failures[0]
    with pytest.raises(QuantizeError, match="no int8 model within the tolerances"):
        result.raise_for_failure()


def test_refusals_come_before_any_work(text_exports, tmp_path: Path):
    source = text_exports.get("standard").path
    with pytest.raises(Exception, match="input of this command"):
        quantize_model(source, source)
    (tmp_path / "taken.onnx").write_bytes(b"x")
    with pytest.raises(QuantizeError, match="--force"):
        quantize_model(source, tmp_path / "taken.onnx")
    with pytest.raises(DataError, match="calibrates on labelled texts"):
        quantize_model(source, tmp_path / "s.onnx", QuantizeOptions(method="static"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "w1", "label": "neg"}\n{"text": "w2", "label": "maybe"}\n')
    with pytest.raises(DataError, match="'maybe' are not the model's"):
        quantize_model(source, tmp_path / "d.onnx", data=bad)
    with pytest.raises(ConfigError, match="grid shape '2x999'"):
        quantize_model(source, tmp_path / "g.onnx", QuantizeOptions(grid="2x999"))
    with pytest.raises(ConfigError, match="unknown quantization method"):
        QuantizeOptions(method="fp4")
    for scaling in ("per-row", "per-batch"):  # static's scales are fixed: neither applies
        with pytest.raises(ConfigError, match=f"--activations {scaling} scales dynamic"):
            QuantizeOptions(method="static", activations=scaling)
    assert QuantizeOptions(method="static").dynamic_activations is None
    assert QuantizeOptions(method="best").dynamic_activations == "per-row"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl", "taken.onnx"]


def test_the_cli_writes_json_and_exits_1_with_nothing_written_outside_the_tolerances(
    text_exports, tmp_path: Path
):
    source = text_exports.get("ganet_mlp").path
    data = labelled_texts(tmp_path / "held_out.jsonl", source)
    # the model's weights are random: its labels are near ties, and int8 may flip a few of
    # them (2 of 38 with onnxruntime 1.32); the label tolerances here are wide on purpose, the
    # logits' stays the default
    done = run_cli("quantize", str(source), "--out", str(tmp_path / "q.onnx"), "--data",
                   str(data), "--min-agreement", "0.8", "--max-accuracy-drop", "0.2",
                   "--threads", "1", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = parse_json(done)
    assert report["written"] and report["method"] == "dynamic"
    checked = report["candidates"][0]["data"]
    assert checked["fp32_accuracy"] == 1.0 and checked["texts"] == len(TEXTS)
    assert report["candidates"][0]["grid"]["gate_flips"] == 0  # GA-Net's gates compared
    assert checked["gate_flips"] == 0 and len(report["candidates"][0]["gate_network"]) == 2
    assert report["options"]["gate_network_fp32"] is True
    int8_gates = run_cli("quantize", str(source), "--out", str(tmp_path / "g.onnx"),
                         "--gate-network-int8", "--min-agreement", "0", "--max-accuracy-drop",
                         "1", "--threads", "1", "--json", cwd=tmp_path)
    assert int8_gates.returncode == 0, int8_gates.stderr
    assert parse_json(int8_gates)["candidates"][0]["gate_network"] == []
    missed = run_cli("quantize", str(source), "--out", str(tmp_path / "r.onnx"),
                     "--max-logit-change", "1e-9", "--threads", "1", cwd=tmp_path)
    assert_one_line_error(missed, "quantize", "no int8 model within the tolerances")
    assert not (tmp_path / "r.onnx").exists()


def test_ganets_gate_network_stays_fp32_so_its_hard_gates_decide_as_in_fp32(
    text_exports, tmp_path: Path
):
    source = text_exports.get("ganet_mlp").path
    data = labelled_texts(tmp_path / "held_out.jsonl", source)
    loose = {"threads": 1, "min_agreement": 0.0, "max_accuracy_drop": 1.0}
    kept = quantize_model(source, tmp_path / "kept.onnx", QuantizeOptions(**loose), data=data)
    gate_network = gate_network_matmuls(onnx.load(str(source)))
    assert len(gate_network) == 2 and kept.chosen.gate_network == gate_network
    assert set(gate_network) <= fp32_matmuls(tmp_path / "kept.onnx")
    record = quantization_record(tmp_path / "kept.onnx")
    assert record["gate_network"] == gate_network and set(gate_network) <= set(record["exclude"])
    assert kept.chosen.grid.gate_flips == 0 and kept.chosen.data.gate_flips == 0
    real_tokens = sum(len(p.tokens) for p in InferenceModel(source, threads=1).predict(
        TEXTS, truncate=True))
    assert kept.chosen.data.gates == real_tokens
    quantized = quantize_model(source, tmp_path / "all.onnx",
                               QuantizeOptions(gate_network_fp32=False, **loose), data=data)
    assert quantized.chosen.gate_network == []
    assert quantized.chosen.quantized_nodes == kept.chosen.quantized_nodes + 2
    assert not set(gate_network) & fp32_matmuls(tmp_path / "all.onnx")


def test_a_model_without_gates_keeps_nothing_for_them(text_exports, tmp_path: Path):
    source = text_exports.get("qvi_pooled").path
    data = labelled_texts(tmp_path / "held_out.jsonl", source)
    result = quantize_model(source, tmp_path / "q.onnx",
                            QuantizeOptions(threads=1, min_agreement=0.0,
                                            max_accuracy_drop=1.0), data=data)
    assert result.chosen.gate_network == [] and result.chosen.excluded == []
    assert result.chosen.grid.gate_flips is None and result.chosen.data.gate_flips is None
    assert quantization_record(tmp_path / "q.onnx")["gate_network"] == []


def test_an_int8_model_is_packaged_and_checked_like_its_fp32_model(text_exports, tmp_path):
    from attndeploy.serving.packaging.check_repo import check_repository
    from attndeploy.serving.packaging.repository import PackageOptions, package_model

    source = text_exports.get("standard").path
    quantize_model(source, tmp_path / "int8.onnx", QuantizeOptions(threads=1))
    package_model(tmp_path / "int8.onnx", tmp_path / "repo", PackageOptions(name="std_int8"))
    report = check_repository(tmp_path / "repo")
    assert report.passed, report.summary()
    ids = np.array([[3, 4, 5, 6]], dtype=np.int64)
    mask = np.ones_like(ids)
    served = InferenceModel(tmp_path / "repo" / "std_int8" / "1" / "model.onnx", threads=1)
    want = InferenceModel(tmp_path / "int8.onnx", threads=1).run(ids, mask)["logits"]
    np.testing.assert_array_equal(served.run(ids, mask)["logits"], want)


def test_exclude_worst_keeps_the_layer_int8_hurts_most_in_fp32(text_exports, tmp_path: Path):
    source = text_exports.get("evolving").path
    plain = quantize_model(source, tmp_path / "a.onnx", QuantizeOptions(threads=1))
    kept = quantize_model(source, tmp_path / "b.onnx", QuantizeOptions(threads=1,
                                                                        exclude_worst=1))
    ranking = kept.chosen.ranking
    assert ranking and ranking[0]["added_error"] >= ranking[-1]["added_error"]
    assert kept.chosen.excluded == kept.chosen.worst == ranking[0]["matmuls"]
    assert kept.chosen.quantized_nodes == (plain.chosen.quantized_nodes
                                           - len(ranking[0]["matmuls"]))
    assert fp32_matmuls(tmp_path / "b.onnx") >= set(ranking[0]["matmuls"])
    assert quantization_record(tmp_path / "b.onnx")["exclude"] == ranking[0]["matmuls"]


def test_the_worst_layers_count_leaves_out_the_users_own_exclude(text_exports, tmp_path: Path):
    source = text_exports.get("evolving").path
    mine = next(node.name for node in onnx.load(str(source)).graph.node
                if node.op_type == "MatMul")
    done = run_cli("quantize", str(source), "--out", str(tmp_path / "q.onnx"), "--exclude",
                   mine, "--exclude-worst", "1", "--threads", "1", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    kept = quantization_record(tmp_path / "q.onnx")["exclude"]
    assert kept[0] == mine and mine not in kept[1:]
    printed = " ".join(done.stdout.split())  # rich wraps at 80 columns without a terminal
    assert f"kept in fp32: {len(kept) - 1} MatMuls of the worst layer(s)" in printed


def test_per_row_activations_answer_each_text_alike_alone_and_in_any_batch(text_exports,
                                                                          tmp_path: Path):
    """Per-batch scales move a text's int8 logits with the texts beside it; per-row ones do not,
    and quantize the same MatMuls."""
    source = text_exports.get("standard").path
    files, counts = {}, {}
    for activations in ("per-batch", "per-row"):
        files[activations] = tmp_path / f"{activations}.onnx"
        counts[activations] = quantize_model(source, files[activations], QuantizeOptions(
            threads=1, activations=activations)).chosen.quantized_nodes

    def alone_and_together(path: Path) -> tuple[np.ndarray, np.ndarray]:
        model = InferenceModel(path, threads=1)
        alone = np.stack([model.predict([text])[0].logits for text in TEXTS])  # [N, labels]
        return alone, np.stack([p.logits for p in model.predict(TEXTS)])  # [N, labels]

    alone, together = alone_and_together(files["per-batch"])
    assert np.abs(alone - together).max() > 1e-4  # the batch moved them
    np.testing.assert_allclose(*alone_and_together(files["per-row"]), atol=1e-6,
                               rtol=0)  # fp32 rounding of other shapes only
    assert quantization_record(files["per-row"])["activations"] == "per-row"
    assert quantization_record(files["per-batch"])["activations"] == "per-batch"
    assert not any(node.op_type == "DynamicQuantizeLinear"
                   for node in onnx.load(str(files["per-row"])).graph.node)
    assert fp32_matmuls(files["per-row"]) == fp32_matmuls(files["per-batch"])
    assert counts["per-row"] == counts["per-batch"] > 0  # its QuantizeLinear nodes are no MatMuls


@pytest.mark.parametrize("asked", [None, "per-row", "per-batch"])
def test_the_cli_writes_the_activation_scaling_asked_per_row_by_default_and_says_so(
        text_exports, tmp_path: Path, asked: str | None):
    source = text_exports.get("standard").path
    flag = ["--activations", asked] if asked else []
    done = run_cli("quantize", str(source), "--out", "q.onnx", *flag, "--threads", "1",
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    made = asked or "per-row"
    assert " ".join(done.stdout.split()).startswith(f"dynamic, {made} activations: ")
    assert quantization_record(tmp_path / "q.onnx")["activations"] == made


def test_tritons_onnxruntime_runs_the_per_row_file_as_this_one_does(text_exports,
                                                                   tmp_path: Path):
    from tests.interop import ort_runner
    from tests.interop.matrix import TRITON_ORT_VERSION, run_in_triton

    source = text_exports.get("ganet_mlp").path
    quantize_model(source, tmp_path / "rows.onnx", QuantizeOptions(threads=1,
                                                                   activations="per-row"))
    rng = np.random.default_rng(0)
    feeds = [{"input_ids": rng.integers(3, 40, (batch, seq)).astype(np.int64),
              "attention_mask": np.ones((batch, seq), np.int64)} for batch, seq in [(1, 5),
                                                                                    (3, 9)]]
    ort_runner.write_feeds(tmp_path / "feeds.npz", feeds)
    version, (runs,) = run_in_triton([tmp_path / "rows.onnx"], tmp_path / "feeds.npz",
                                     tmp_path / "triton")
    assert version == TRITON_ORT_VERSION and "error" not in runs, runs
    model = InferenceModel(tmp_path / "rows.onnx", threads=1)
    for index, feed in enumerate(feeds):
        here = model.run(feed["input_ids"], feed["attention_mask"])
        np.testing.assert_allclose(runs[f"plain/{index}/logits"], here["logits"], atol=1e-5)
        np.testing.assert_array_equal(runs[f"plain/{index}/gates"], here["gates"])


def int8_weight_extremes(path: Path) -> tuple[int, int]:
    """The smallest and largest value of the int8 weights in an ONNX file."""
    from onnx import numpy_helper

    values = [numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer
              if t.data_type == onnx.TensorProto.INT8]
    return min(int(v.min()) for v in values), max(int(v.max()) for v in values)


def test_reduce_range_writes_7_bit_weights_and_records_it(text_exports, tmp_path: Path):
    source = text_exports.get("standard").path
    done = run_cli("quantize", str(source), "--out", str(tmp_path / "r.onnx"), "--reduce-range",
                   "--threads", "1", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert parse_json(done)["options"]["reduce_range"] is True
    assert quantization_record(tmp_path / "r.onnx")["reduce_range"] is True
    low, high = int8_weight_extremes(tmp_path / "r.onnx")
    assert -64 <= low and high <= 64  # 7 bits (onnxruntime rounds the symmetric range to 64)
    quantize_model(source, tmp_path / "full.onnx", QuantizeOptions(threads=1))
    low, high = int8_weight_extremes(tmp_path / "full.onnx")
    assert max(-low, high) == 127  # 8 bits without it


@pytest.mark.parametrize(("vnni", "reduce_range_hinted"), [(False, True), (True, False),
                                                            (None, False)])
def test_a_miss_says_which_options_to_try(text_exports, tmp_path: Path, monkeypatch,
                                          vnni: bool | None, reduce_range_hinted: bool):
    monkeypatch.setattr("attndeploy.quantize.cpu.has_vnni", lambda: vnni)
    source = text_exports.get("standard").path
    missed = quantize_model(source, tmp_path / "q.onnx",
                            QuantizeOptions(threads=1, max_logit_change=1e-9,
                                            activations="per-batch"))
    with pytest.raises(QuantizeError) as caught:
        missed.raise_for_failure()
    assert "try --activations per-row" in str(caught.value)
    assert "or --exclude-worst N" in str(caught.value)
    assert ("--reduce-range" in str(caught.value)) is reduce_range_hinted


def test_a_miss_with_every_option_on_suggests_nothing(text_exports, tmp_path: Path,
                                                      monkeypatch):
    monkeypatch.setattr("attndeploy.quantize.cpu.has_vnni", lambda: False)  # would hint all
    tried = quantize_model(text_exports.get("standard").path, tmp_path / "r.onnx",
                           QuantizeOptions(threads=1, max_logit_change=1e-9, exclude_worst=1,
                                           reduce_range=True))  # per row: the default
    with pytest.raises(QuantizeError) as caught:
        tried.raise_for_failure()
    assert "no int8 model within the tolerances" in str(caught.value)
    assert "; try " not in str(caught.value)


@pytest.mark.parametrize(("gate_network_fp32", "grid_flips", "text_flips", "hinted"), [
    (False, 3, None, True), (False, 0, 2, True), (False, 0, 0, False), (True, 3, 2, False)])
def test_a_miss_whose_int8_gates_flipped_suggests_the_gate_network_in_fp32(
    tmp_path: Path, gate_network_fp32: bool, grid_flips: int, text_flips: int | None,
    hinted: bool
):
    from attndeploy.quantize.check import DataCheck, GridCheck
    from attndeploy.quantize.quantizer import Candidate, QuantizeResult

    data = (None if text_flips is None else
            DataCheck(10, 0.9, 1.0, 0.9, "held_out.jsonl", gate_flips=text_flips, gates=50))
    missed = Candidate("dynamic", GridCheck(2.0, 1.0, grid_flips, [(1, 8)]), data, 0, 0,
                       failures=["largest logit change 2 > 1"])
    options = QuantizeOptions(gate_network_fp32=gate_network_fp32, exclude_worst=1,
                              reduce_range=True)
    result = QuantizeResult(tmp_path / "a.onnx", tmp_path / "b.onnx", options, [missed], None, 0)
    with pytest.raises(QuantizeError) as caught:
        result.raise_for_failure()
    assert ("try --gate-network-fp32" in str(caught.value)) is hinted


def _alone(text_exports, case: str, folder: Path) -> Path:
    """A copy of a text export alone in `folder`, so that anything written beside it shows."""
    import shutil

    folder.mkdir()
    return Path(shutil.copyfile(text_exports.get(case).path, folder / "model.onnx"))


def _record_shape_inference(monkeypatch, then=None) -> list[Path]:
    """The files onnxruntime.quantization has onnx's shape inference write (its
    `<model>-inferred.onnx`), each call then running `then` (an interruption)."""
    import onnx.shape_inference

    written: list[Path] = []
    real = onnx.shape_inference.infer_shapes_path

    def infer_shapes_path(model_path, output_path="", *args, **kwargs):
        real(model_path, output_path, *args, **kwargs)
        written.append(Path(output_path or model_path))
        if then is not None:
            then()

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes_path", infer_shapes_path)
    return written


@pytest.mark.parametrize("method", ["dynamic", "best"])
def test_nothing_is_written_beside_the_input_model(text_exports, tmp_path: Path, monkeypatch,
                                                   method: str):
    # onnxruntime writes `<model>-inferred.onnx` beside the model it is given
    source = _alone(text_exports, "standard", tmp_path / "in")
    data = labelled_texts(tmp_path / "held_out.jsonl", source, wrong=4)
    before = {p.name: p.read_bytes() for p in source.parent.iterdir()}
    written = _record_shape_inference(monkeypatch)
    result = quantize_model(source, tmp_path / "int8.onnx",
                            QuantizeOptions(method=method, threads=1, min_agreement=0,
                                            max_accuracy_drop=1), data=data)
    assert result.passed
    assert [c.method for c in result.candidates] == (
        ["dynamic"] if method == "dynamic" else ["dynamic", "static"])
    assert written and not [p for p in written if p.parent in (source.parent, tmp_path)]
    assert {p.name: p.read_bytes() for p in source.parent.iterdir()} == before


def test_a_ctrl_c_inside_onnxruntime_leaves_nothing_beside_the_input(text_exports,
                                                                      tmp_path: Path,
                                                                      monkeypatch):
    source = _alone(text_exports, "standard", tmp_path / "in")

    def ctrl_c() -> None:
        raise KeyboardInterrupt

    _record_shape_inference(monkeypatch, then=ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        quantize_model(source, tmp_path / "int8.onnx", QuantizeOptions(threads=1))
    assert [p.name for p in source.parent.iterdir()] == ["model.onnx"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


def test_a_file_named_like_onnxruntimes_scratch_beside_the_input_is_left_alone(
    text_exports, tmp_path: Path
):
    source = _alone(text_exports, "standard", tmp_path / "in")
    mine = source.parent / "model-inferred.onnx"
    mine.write_bytes(b"the user's own file")
    target = tmp_path / "elsewhere.txt"
    target.write_bytes(b"what a link points at")
    link = source.parent / "int8-inferred.onnx"  # a second run quantizes the first's output
    link.symlink_to(target)
    quantize_model(source, tmp_path / "in" / "int8.onnx", QuantizeOptions(threads=1))
    quantize_model(source.parent / "int8.onnx", tmp_path / "in" / "again.onnx",
                   QuantizeOptions(threads=1, max_logit_change=100))
    assert mine.read_bytes() == b"the user's own file"
    assert link.is_symlink() and target.read_bytes() == b"what a link points at"
    assert sorted(p.name for p in source.parent.iterdir()) == [
        "again.onnx", "int8-inferred.onnx", "int8.onnx", "model-inferred.onnx", "model.onnx"]


def test_a_model_with_external_data_is_copied_whole(text_exports, tmp_path: Path, monkeypatch):
    monkeypatch.setattr("attndeploy.quantize.quantizer.EXTERNAL_DATA_BYTES", 0)
    folder = tmp_path / "in"
    folder.mkdir()
    source = folder / "model.onnx"
    onnx.save(onnx.load(str(text_exports.get("standard").path)), str(source),
              save_as_external_data=True, location="weights.data")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    written = _record_shape_inference(monkeypatch)
    result = quantize_model(source, tmp_path / "int8.onnx", QuantizeOptions(threads=1))
    assert result.passed and result.chosen.quantized_nodes > 0
    assert written[0].name == "source-inferred.onnx"  # the private copy, weights beside it
    assert not [p for p in written if p.parent == folder]
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
