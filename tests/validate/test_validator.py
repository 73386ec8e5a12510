"""`validate_model` end to end on tiny exported models, and the ways it must refuse or fail.

Negative cases edit a copy of an exported file (a function body, an initializer, the metadata),
so no test exports more than the session fixtures do.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from attndeploy.errors import ValidationError
from attndeploy.validate import (
    ORT_ALL,
    ORT_NONE,
    REFERENCE,
    OrtRunner,
    ReferenceRunner,
    TorchRunner,
    ValidationOptions,
    make_inputs,
    parse_shapes,
    validate_model,
)
from attndeploy.validate.report import SCHEMA
from tests.validate.conftest import CASES, MAX_SEQ, VOCAB

FAST = dict(shapes="1x1,2x5,4x17", reference_shapes="2x5")
STAT_KEYS = {"max_abs", "mean_abs", "p99_abs", "max_rel", "mean_rel", "p99_rel", "nan_count",
             "inf_count", "cosine", "min_atol", "min_rtol", "argmax_agreement", "failing"}


def _save(model: onnx.ModelProto, path):
    onnx.save(model, str(path))
    return path


def _set_metadata(model: onnx.ModelProto, key: str, value: str) -> None:
    for prop in model.metadata_props:
        if prop.key == f"attndeploy.{key}":
            prop.value = value
            return
    raise KeyError(key)


# ----------------------------------------------------------------------------- every variant


@pytest.mark.parametrize("name", list(CASES))
def test_exported_model_passes_with_default_tolerances(name, artifacts, tmp_path):
    case = artifacts.get(name)
    report = validate_model(case.checkpoint, case.onnx)
    data = report.to_json()
    assert report and data["passed"], report.failures()
    report.raise_for_failure()  # a passing report raises nothing
    assert data["failures"] == []
    assert data["timings"]["total_s"] < 60

    # schema
    assert data["schema"] == SCHEMA and data["schema_version"] == 1
    for key in ("model", "reference", "tolerances", "shapes", "oracles", "gates", "padding",
                "failures", "timings", "environment", "notes"):
        assert key in data
    assert data["tolerances"]["default"] == {"atol": 1e-5, "rtol": 1e-4}
    assert data["model"]["variant"] == case.config.variant
    assert data["model"]["weights_sha256"]
    assert set(data["oracles"]) == {ORT_ALL, ORT_NONE, REFERENCE}
    grid = [s["shape"] for s in data["shapes"]]
    assert f"1x{MAX_SEQ}" in grid and "1x1" in grid
    assert data["oracles"][ORT_ALL]["shapes"] == grid
    reference = data["oracles"][REFERENCE]
    assert 0 < len(reference["shapes"]) < len(grid) and "slow" in reference["note"]
    assert any("ReferenceEvaluator" in note for note in data["notes"])
    for oracle in data["oracles"].values():
        assert oracle["status"] == "passed"
        for result in oracle["results"]:
            logits = result["outputs"]["logits"]
            assert STAT_KEYS <= set(logits)
            assert logits["argmax_agreement"] == 1.0
            assert logits["max_abs"] <= 1e-5
    for key in ("torch", "onnx", "onnxruntime", "numpy", "python"):
        assert data["environment"][key]
    assert data["padding"]["passed"] and data["padding"]["cases"]
    assert set(data["timings"]["oracles"]) == set(data["oracles"])

    # outputs per variant: gates for GA-Net, per-token logits for tagging
    gated = case.config.variant == "ganet"
    assert (data["gates"] is not None) == gated
    first = data["oracles"][ORT_ALL]["results"]
    if gated:
        assert data["gates"]["flips"] == 0 and data["gates"]["margin"] > 0
        assert all(r["outputs"]["gates"]["flips"] == 0 for r in first)
    if case.config.head == "tagging":
        by_shape = {r["shape"]: r for r in first}
        lengths = {s["shape"]: s["lengths"] for s in data["shapes"]}
        real = sum(lengths["4x17"])
        assert by_shape["4x17"]["outputs"]["logits"]["compared"] == real * case.config.num_labels

    # files: JSON parses back, Markdown says it passed, the histogram is a PNG
    paths = report.write(tmp_path)
    assert json.loads(paths["json"].read_text())["passed"] is True
    markdown = paths["markdown"].read_text()
    assert markdown.startswith("# Parity validation: PASSED")
    assert "onnx-reference" in markdown
    assert paths["histogram"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ----------------------------------------------------------------------------- failures


def test_an_altered_function_body_fails_and_names_logits(artifacts, tmp_path):
    case = artifacts.get("qvi_pooled")
    model = case.load()
    (function,) = [f for f in model.functions if f.name == "QVIAttention"]
    result_name = function.output[0]
    for node in function.node:  # rename the producer of the function's output ...
        node.output[:] = [f"{o}_raw" if o == result_name else o for o in node.output]
    function.node.extend([  # ... and multiply it by 1.01
        helper.make_node("Constant", [], ["scale_101"],
                         value=numpy_helper.from_array(np.array(1.01, np.float32))),
        helper.make_node("Mul", [f"{result_name}_raw", "scale_101"], [result_name]),
    ])
    altered = _save(model, tmp_path / "altered.onnx")
    report = validate_model(case.checkpoint, altered, ValidationOptions(**FAST))
    data = report.to_json()
    assert not report and data["passed"] is False
    for oracle in (ORT_ALL, ORT_NONE, REFERENCE):
        assert data["oracles"][oracle]["status"] == "failed"
    parity = [f for f in data["failures"] if f["check"] == "parity"]
    assert parity and {f["output"] for f in parity} == {"logits"}
    assert {f["shape"] for f in parity} >= {"2x5", "4x17"}
    assert all(f["message"] for f in parity)
    with pytest.raises(ValidationError, match=r"onnxruntime\[all\], 2x5, logits"):
        report.raise_for_failure()
    # the report is still complete and writes a failing Markdown summary
    paths = report.write(tmp_path / "out")
    assert "FAILED" in paths["markdown"].read_text().splitlines()[0]
    assert "logits" in paths["markdown"].read_text()


def test_gates_pushed_across_zero_are_reported_as_flips(artifacts, tmp_path):
    case = artifacts.get("ganet")
    model = case.load()
    feed = make_inputs(parse_shapes("4x17")[0], VOCAB)
    with TorchRunner(case.load_model()) as torch_runner:
        s = torch_runner.infer(feed)["gate_logits"][feed["attention_mask"] != 0]
    negative = s[s < -1e-3]
    assert negative.size, "the fixture needs closed gates to open"
    offset = float(-np.median(negative))  # opens about half of the closed real gates
    (bias,) = [i for i in model.graph.initializer if i.name.endswith("gates.network.score.bias")]
    bias.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(bias) + np.float32(offset),
                                          bias.name))
    pushed = _save(model, tmp_path / "pushed.onnx")
    report = validate_model(case.checkpoint, pushed,
                            ValidationOptions(shapes="4x17,2x5", oracles=(ORT_ALL,)))
    data = report.to_json()
    assert not report
    assert data["gates"]["flips"] > 0
    assert data["gates"]["refused_flips"] == data["gates"]["flips"]
    assert data["gates"]["flip_margin"] >= 1e-4
    gate_failures = [f for f in data["failures"] if f["output"] == "gates"]
    assert gate_failures and gate_failures[0]["shape"] == "4x17"
    assert "flip" in gate_failures[0]["message"]


def test_padding_that_changes_outputs_fails_the_padding_check(artifacts, tmp_path):
    case = artifacts.get("standard")
    model = case.load()
    graph = model.graph
    for node in graph.node:
        node.output[:] = ["logits_raw" if o == "logits" else o for o in node.output]
    # logits + 1e-3 · (number of padded positions): depends on how much padding a row has
    graph.initializer.extend([
        numpy_helper.from_array(np.array([1], np.int64), "pad_axis"),
        numpy_helper.from_array(np.array(1e-3, np.float32), "pad_weight"),
    ])
    graph.node.extend([
        helper.make_node("Cast", ["attention_mask"], ["mask_bool"], to=TensorProto.BOOL),
        helper.make_node("Not", ["mask_bool"], ["pad_bool"]),
        helper.make_node("Cast", ["pad_bool"], ["pad_f"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["pad_f", "pad_axis"], ["pads"], keepdims=1),  # [B, 1]
        helper.make_node("Mul", ["pads", "pad_weight"], ["shift"]),
        helper.make_node("Add", ["logits_raw", "shift"], ["logits"]),
    ])
    changed = _save(model, tmp_path / "padding.onnx")
    report = validate_model(case.checkpoint, changed,
                            ValidationOptions(shapes="1x5,2x9", oracles=(ORT_ALL,)))
    data = report.to_json()
    assert not report and data["padding"]["passed"] is False
    padding = [f for f in data["failures"] if f["check"] == "padding"]
    assert {f["shape"] for f in padding} == {"1x5", "2x9"}
    assert {f["output"] for f in padding} == {"logits"}
    # 1x5 has no padding of its own, so parity holds there; 2x9 has a padded row and fails
    parity = {f["shape"] for f in data["failures"] if f["check"] == "parity"}
    assert parity == {"2x9"}


def test_a_runtime_without_a_kernel_is_reported_as_unsupported(artifacts, tmp_path):
    case = artifacts.get("standard")
    model = case.load()
    graph = model.graph
    for node in graph.node:
        node.output[:] = ["logits_raw" if o == "logits" else o for o in node.output]
    # logits + 0·|bf16(logits)|: same values, but onnxruntime's CPU provider has no bf16 Abs
    graph.initializer.append(numpy_helper.from_array(np.array(0.0, np.float32), "zero"))
    graph.node.extend([
        helper.make_node("Cast", ["logits_raw"], ["logits_bf16"], to=TensorProto.BFLOAT16),
        helper.make_node("Abs", ["logits_bf16"], ["abs_bf16"]),
        helper.make_node("Cast", ["abs_bf16"], ["abs_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["abs_f", "zero"], ["nothing"]),
        helper.make_node("Add", ["logits_raw", "nothing"], ["logits"]),
    ])
    edited = _save(model, tmp_path / "bf16.onnx")
    report = validate_model(case.checkpoint, edited,
                            ValidationOptions(shapes="2x5", oracles=(ORT_ALL, ORT_NONE)))
    data = report.to_json()
    assert data["passed"] is False
    for name in (ORT_ALL, ORT_NONE):
        oracle = data["oracles"][name]
        assert oracle["status"] == "unsupported"
        assert "NOT_IMPLEMENTED" in oracle["message"]
    runtime = [f for f in data["failures"] if f["check"] == "runtime"]
    assert {f["oracle"] for f in runtime} == {ORT_ALL, ORT_NONE}
    assert data["padding"] is None
    assert any("padding check not run" in note for note in data["notes"])
    report.write_json(tmp_path / "report.json")  # still serialisable


def test_fp16_metadata_selects_fp16_tolerances(artifacts, tmp_path):
    case = artifacts.get("standard")
    model = case.load()
    _set_metadata(model, "dtype", "float16")
    path = _save(model, tmp_path / "fp16.onnx")
    report = validate_model(case.checkpoint, path, ValidationOptions(shapes="2x5",
                                                                      oracles=(ORT_ALL,)))
    data = report.to_json()
    assert data["tolerances"]["default"] == {"atol": 1e-2, "rtol": 1e-2}
    assert data["model"]["dtype"] == "float16"
    assert any("fp16" in note for note in data["notes"])
    assert report


def test_tolerance_options_override_the_defaults(artifacts):
    case = artifacts.get("standard")
    options = ValidationOptions(atol=0.0, rtol=0.0, per_output={"logits": (1e-3, 0.0)},
                                shapes="2x5", oracles=(ORT_ALL,), padding_check=False)
    data = validate_model(case.checkpoint, case.onnx, options).to_json()
    assert data["tolerances"]["default"] == {"atol": 0.0, "rtol": 0.0}
    assert data["tolerances"]["per_output"] == {"logits": {"atol": 1e-3, "rtol": 0.0}}
    logits = data["oracles"][ORT_ALL]["results"][0]["outputs"]["logits"]
    assert logits["atol"] == 1e-3 and data["passed"]
    assert data["padding"] is None
    with pytest.raises(ValidationError, match="no float output 'gates'"):
        validate_model(case.checkpoint, case.onnx, ValidationOptions(per_output={"gates": (1, 1)}))


# ----------------------------------------------------------------------------- refusals


def test_an_onnx_file_from_another_checkpoint_is_refused(artifacts):
    standard, other = artifacts.get("standard"), artifacts.get("qvi_pooled")
    from attndeploy.checkpoint import read_checkpoint

    want = read_checkpoint(other.checkpoint).weights_sha256
    got = read_checkpoint(standard.checkpoint).weights_sha256
    with pytest.raises(ValidationError, match="exported from a different checkpoint") as info:
        validate_model(other.checkpoint, standard.onnx)
    assert want in str(info.value) and got in str(info.value)


def test_an_onnx_file_not_made_by_attndeploy_is_refused(artifacts, tmp_path):
    graph = helper.make_graph(
        [helper.make_node("Identity", ["input_ids"], ["logits"])], "plain",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("logits", TensorProto.INT64, ["batch", "seq"])],
    )
    path = _save(helper.make_model(graph), tmp_path / "plain.onnx")
    with pytest.raises(ValidationError, match="not made by attndeploy export"):
        validate_model(artifacts.get("standard").checkpoint, path)
    (tmp_path / "junk.onnx").write_bytes(b"not a protobuf at all")
    with pytest.raises(ValidationError, match="not a readable ONNX file"):
        validate_model(artifacts.get("standard").checkpoint, tmp_path / "junk.onnx")


def test_a_folder_given_as_the_onnx_file_is_named_a_folder(artifacts, tmp_path):
    with pytest.raises(ValidationError, match="is a folder; give the exported ONNX file"):
        validate_model(artifacts.get("standard").checkpoint, tmp_path)


def test_shapes_beyond_the_graphs_seq_limit_are_refused_before_running(artifacts, tmp_path):
    case = artifacts.get("standard")
    model = case.load()
    _set_metadata(model, "max_seq", "16")
    path = _save(model, tmp_path / "short.onnx")
    calls = []
    options = ValidationOptions(shapes="1x1,2x20", progress=lambda *a: calls.append(a))
    with pytest.raises(ValidationError, match=r"2x20.*maximum sequence length 16"):
        validate_model(case.checkpoint, path, options)
    assert calls == []  # nothing ran
    report = validate_model(case.checkpoint, path, ValidationOptions(oracles=(ORT_ALL,)))
    assert max(s.seq for s, _ in report.shapes) == 16  # the default grid respects the limit


# ----------------------------------------------------------------------------- runners, progress


def test_progress_reaches_the_total_and_extra_runners_join_the_report(artifacts):
    case = artifacts.get("ganet")
    calls = []
    extra = OrtRunner(case.onnx, "none", threads=1)
    extra.name = "extra-ort"
    options = ValidationOptions(**FAST, extra_runners=(extra,),
                                progress=lambda done, total, what: calls.append((done, total)))
    report = validate_model(case.checkpoint, case.onnx, options)
    assert report and "extra-ort" in report.to_json()["oracles"]
    totals = {total for _, total in calls}
    assert len(totals) == 1
    assert [done for done, _ in calls] == list(range(1, totals.pop() + 1))


def test_a_rich_progress_bar_is_driven_to_completion(artifacts):
    from rich.progress import Progress

    case = artifacts.get("standard")
    with Progress(disable=True) as progress:
        validate_model(case.checkpoint, case.onnx,
                       ValidationOptions(shapes="2x5", oracles=(ORT_ALL,), progress=progress))
        (task,) = progress.tasks
        assert task.total and task.completed == task.total


def test_runners_share_one_interface(artifacts):
    case = artifacts.get("ganet")
    feed = make_inputs(parse_shapes("2x5")[0], VOCAB)
    runners = [TorchRunner(case.load_model()), OrtRunner(case.onnx, "all"),
               ReferenceRunner(case.onnx)]
    outputs = []
    for runner in runners:
        with pytest.raises(ValidationError, match="not active"):
            runner.infer(feed)
        with runner:
            outputs.append(runner.infer(feed))
        assert isinstance(runner.name, str) and runner.name
    torch_out, ort_out, ref_out = outputs
    assert torch_out["logits"].dtype == np.float32 and torch_out["gates"].dtype == np.bool_
    assert torch_out["gate_logits"].shape == (2, 5)
    for got in (ort_out, ref_out):
        assert set(got) == {"logits", "gates"}
        np.testing.assert_array_equal(got["gates"], torch_out["gates"])
    with pytest.raises(ValidationError, match="optimization"):
        OrtRunner(case.onnx, "some")
