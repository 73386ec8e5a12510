"""Contract tests of the model exporter over every case of `tests/cases.py` (docs/ops.md,
"Model-level interface"; docs/architecture.md, "Export: facts established").

Every case is exported once per session (`conftest.exports`). The expectations here are written
out independently of `attndeploy.export.exporter` (the op counts per variant, the interface dims),
and numbers are compared with the checkpoint's PyTorch model in eval mode at shapes unlike the
export example (batch 2, seq 8), with the rule of docs/architecture.md: an element fails only if
|a - b| > atol AND |a - b| > rtol·|b|.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from attndeploy import __version__
from attndeploy.config import GANetConfig, ModelConfig
from attndeploy.errors import ExportError, OutputError
from attndeploy.export import exporter, generic
from attndeploy.export.exporter import ExportOptions, check_structure, export_checkpoint
from attndeploy.fsutil import file_sha256
from tests.cases import TINY_MAX_SEQ, case_params
from tests.export.conftest import ALL_CASE_IDS, Exports
from tests.helpers import assert_close, token_batch

DOMAIN = "attndeploy"
RANDOM_OPS = {"RandomUniform", "RandomUniformLike", "RandomNormal", "RandomNormalLike",
              "Bernoulli", "Multinomial"}
# (lengths, width): shapes unlike the export example, with padding, seq 1 and the largest seq.
SHAPES = (((11, 7, 1), 11), ((1,), 1), ((TINY_MAX_SEQ, 5), TINY_MAX_SEQ))


def expected_nodes(config: ModelConfig) -> Counter:
    """docs/ops.md: one custom node per attention layer, plus GA-Net's gated pooling."""
    n = config.n_layers if config.family == "transformer" else 0
    per_variant = {
        "standard": Counter(),
        "qvi": Counter({"QVIAttention" if config.qvi.form == "pooled"
                        else "QVIPairwiseAttention": n}),
        "ganet": Counter({"GatedAttention": n}),
        "evolving": Counter({"EvolvingAttentionStart": 1, "EvolvingAttention": n - 1}),
    }
    expected = +per_variant[config.variant]
    if config.variant == "ganet" and config.head == "classification":
        expected["GatedAttentionPooling"] = 1
    return expected


def expected_lstms(config: ModelConfig) -> int:
    """One standard `LSTM` per direction and layer: backbone 2x2, BiLSTM gate network 1x2."""
    backbone = 4 if config.family == "bilstm" else 0
    aux = 2 if config.variant == "ganet" and config.ganet.aux == "bilstm" else 0
    return backbone + aux


def dims(value: onnx.ValueInfoProto) -> list[str | int]:
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


def expected_io(config: ModelConfig) -> dict[str, tuple[int, list]]:
    logits = ["batch", "seq", 3] if config.head == "tagging" else ["batch", 3]
    io = {
        "input_ids": (onnx.TensorProto.INT64, ["batch", "seq"]),
        "attention_mask": (onnx.TensorProto.INT64, ["batch", "seq"]),
        "logits": (onnx.TensorProto.FLOAT, logits),
    }
    if config.variant == "ganet":
        io["gates"] = (onnx.TensorProto.BOOL, ["batch", "seq"])
    return io


def compare_outputs(got: list[np.ndarray], want: dict[str, torch.Tensor], config: ModelConfig,
                    tolerance: tuple[float, float]) -> None:
    assert_close(torch.from_numpy(got[0]), want["logits"].float(), tolerance)
    if config.variant == "ganet":
        np.testing.assert_array_equal(got[1], want["gates"].numpy())


# ----------------------------------------------------------------------------- structure


@pytest.mark.parametrize("case_id", ALL_CASE_IDS)
def test_every_case_exports_one_custom_node_per_attention_layer_each_with_a_function(
    exports: Exports, case_id: str
) -> None:
    exported = exports.get(case_id)
    model = exported.load()
    found = Counter(n.op_type for n in model.graph.node if n.domain == DOMAIN)
    assert found == expected_nodes(exported.config)
    assert exported.result.custom_nodes == dict(found)
    functions = {(f.domain, f.name) for f in model.functions}
    assert functions == {(DOMAIN, op) for op in found}, "one function per custom op type"
    imports = {o.domain: o.version for o in model.opset_import}
    assert imports[""] == 18
    assert (DOMAIN in imports) == bool(found)
    for function in model.functions:
        assert {n.domain for n in function.node} <= {""}, "bodies use standard ops only"
        assert {o.domain: o.version for o in function.opset_import}[""] == 18


@pytest.mark.parametrize("case_id", ALL_CASE_IDS)
def test_every_lstm_direction_run_is_one_standard_lstm_node(exports: Exports, case_id: str):
    exported = exports.get(case_id)
    ops = Counter(n.op_type for n in exported.load().graph.node)
    assert ops["LSTM"] == expected_lstms(exported.config)
    assert not {"Loop", "Scan", "If"} & set(ops), "no unrolled or looped recurrence"


@pytest.mark.parametrize("case_id", ALL_CASE_IDS)
def test_batch_and_seq_stay_symbolic_on_every_input_and_output(exports: Exports, case_id: str):
    exported = exports.get(case_id)
    model = exported.load()
    want = expected_io(exported.config)
    values = {v.name: v for v in [*model.graph.input, *model.graph.output]}
    assert [v.name for v in model.graph.input] == ["input_ids", "attention_mask"]
    assert [v.name for v in model.graph.output] == list(want)[2:]
    for name, (elem_type, shape) in want.items():
        assert values[name].type.tensor_type.elem_type == elem_type, name
        assert dims(values[name]) == shape, name


@pytest.mark.parametrize("case_id", ALL_CASE_IDS)
def test_metadata_records_variant_version_config_weights_and_opset(
    exports: Exports, case_id: str
) -> None:
    exported = exports.get(case_id)
    meta = {p.key: p.value for p in exported.load().metadata_props}
    assert meta["attndeploy.variant"] == exported.config.variant
    assert meta["attndeploy.version"] == __version__
    assert json.loads(meta["attndeploy.config"]) == exported.config.to_dict()
    assert ModelConfig.from_dict(json.loads(meta["attndeploy.config"])) == exported.config
    assert meta["attndeploy.weights_sha256"] == file_sha256(
        exported.checkpoint / "model.safetensors"
    )
    assert meta["attndeploy.opset"] == "18"
    assert meta["attndeploy.max_seq"] == str(exported.config.max_seq)
    assert json.loads(meta["attndeploy.labels"]) == ["neg", "neu", "pos"]
    assert exporter.read_metadata(exported.path)["variant"] == exported.config.variant


@pytest.mark.parametrize("case_id", ALL_CASE_IDS)
def test_graph_and_functions_hold_no_random_op(exports: Exports, case_id: str) -> None:
    model = exports.get(case_id).load()
    nodes = [*model.graph.node, *(n for f in model.functions for n in f.node)]
    assert not RANDOM_OPS & {n.op_type for n in nodes}
    assert "Dropout" not in {n.op_type for n in nodes}


# ----------------------------------------------------------------------------- numbers


@pytest.mark.parametrize("case_id", ALL_CASE_IDS)
def test_onnxruntime_matches_pytorch_eval_at_shapes_unlike_the_export_example(
    exports: Exports, case_id: str
) -> None:
    exported = exports.get(case_id)
    tolerance = exported.case.tolerance("float32")
    for lengths, width in SHAPES:
        ids, mask = token_batch(lengths, width, seed=width)
        want = exported.reference(ids, mask)
        for optimize in (True, False):
            compare_outputs(exported.run(ids, mask, optimize=optimize), want, exported.config,
                            tolerance)


@pytest.mark.parametrize("case", case_params("padding_invariance"))
def test_padding_never_changes_the_results_of_real_tokens_in_onnxruntime(exports, case):
    exported = exports.get(case.id)
    lengths = (6, 3)
    short_ids, short_mask = token_batch(lengths, 6, seed=3)
    garbage = torch.randint(1, 50, (2, 7), generator=torch.Generator().manual_seed(4))
    long_ids = torch.cat([short_ids, garbage], dim=1)  # real-looking ids under mask 0
    long_mask = torch.cat([short_mask, torch.zeros(2, 7, dtype=torch.long)], dim=1)
    short = exported.run(short_ids, short_mask)
    long = exported.run(long_ids, long_mask)
    logits_short, logits_long = torch.from_numpy(short[0]), torch.from_numpy(long[0])
    if exported.config.head == "tagging":
        logits_long = logits_long[:, :6]
    assert_close(logits_long, logits_short, case.tolerance("float32"))
    if exported.config.variant == "ganet":
        np.testing.assert_array_equal(long[1][:, :6], short[1])
        assert not long[1][:, 6:].any(), "a padded position never opens"


# ----------------------------------------------------------------------------- options


@pytest.mark.parametrize("case_id", ["ganet_mlp"])  # two op types, gates; the bodies: test_ops
def test_inline_functions_writes_the_same_model_without_custom_nodes(exports, case_id):
    plain, inlined = exports.get(case_id), exports.get(case_id, inline_functions=True)
    model = inlined.load()
    assert not [n for n in model.graph.node if n.domain == DOMAIN]
    assert not model.functions
    assert {o.domain for o in model.opset_import} == {""}
    assert inlined.result.custom_nodes == {}
    assert {p.key: p.value for p in model.metadata_props}["attndeploy.inlined"] == "true"
    assert dims(model.graph.input[0]) == ["batch", "seq"]
    for lengths, width in SHAPES[:2]:
        ids, mask = token_batch(lengths, width, seed=width)
        got, want = inlined.run(ids, mask), plain.run(ids, mask)
        assert_close(torch.from_numpy(got[0]), torch.from_numpy(want[0]),
                     inlined.case.tolerance("float32"))
        for a, b in zip(got[1:], want[1:], strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("case_id", ["standard", "ganet_bilstm_family"])  # + LSTM, a function
def test_opset_23_runs_in_onnxruntime_and_sdpa_becomes_one_attention_node(exports, case_id):
    exported = exports.get(case_id, opset=23)
    model = exported.load()
    assert {o.domain: o.version for o in model.opset_import}[""] == 23
    assert all({o.domain: o.version for o in f.opset_import}[""] == 23 for f in model.functions)
    ops = Counter(n.op_type for n in model.graph.node if n.domain == "")
    if case_id == "standard":
        assert ops["Attention"] == exported.config.n_layers
        assert ops["Softmax"] == 1, "only the pooling head's softmax is left"
    onnx.checker.check_model(model, full_check=True)
    for lengths, width in SHAPES:
        ids, mask = token_batch(lengths, width, seed=width)
        compare_outputs(exported.run(ids, mask), exported.reference(ids, mask),
                        exported.config, exported.case.tolerance("float32"))


# A float16 LSTM and gated pooling; the evolving ops' float16 bodies (the op bodies alone: test_ops)
FP16_CASES = ("ganet_bilstm_family", "evolving")


@pytest.mark.parametrize("case", [p for p in case_params("fp16") if p.id in FP16_CASES])
def test_fp16_export_runs_on_cpu_with_float32_logits_close_to_fp32_pytorch(exports, case):
    exported = exports.get(case.id, fp16=True)
    model = exported.load()
    assert {p.key: p.value for p in model.metadata_props}["attndeploy.dtype"] == "float16"
    weights = [t for t in model.graph.initializer if int(np.prod(t.dims)) > 1]
    assert {t.data_type for t in weights if t.data_type != onnx.TensorProto.INT64} == {
        onnx.TensorProto.FLOAT16}, "every float weight is float16"
    assert model.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    for lengths, width in SHAPES:
        ids, mask = token_batch(lengths, width, seed=width)
        got = exported.run(ids, mask)
        want = exported.reference(ids, mask)  # the fp32 checkpoint
        assert got[0].dtype == np.float32
        assert_close(torch.from_numpy(got[0]), want["logits"], case.tolerance("float16"))


def test_max_seq_below_the_models_is_recorded_and_a_larger_one_is_refused(exports):
    exported = exports.get("ganet_mlp", {"dropout": 0.2}, max_seq=8)
    meta = exporter.read_metadata(exported.path)
    assert meta["max_seq"] == "8" and json.loads(meta["config"])["max_seq"] == TINY_MAX_SEQ
    assert exported.result.to_json()["max_seq"] == 8
    ids, mask = token_batch((8, 2), 8, seed=8)
    compare_outputs(exported.run(ids, mask), exported.reference(ids, mask), exported.config,
                    exported.case.tolerance("float32"))
    _, checkpoint = exports.checkpoint("ganet_mlp")
    with pytest.raises(ExportError, match="exceeds the model's max_seq 16"):
        export_checkpoint(checkpoint, exports.root / "never.onnx",
                          ExportOptions(max_seq=TINY_MAX_SEQ + 1))
    with pytest.raises(ExportError, match="--max-seq must be >= 2"):
        ExportOptions(max_seq=1)
    assert not (exports.root / "never.onnx").exists()


def test_dropout_in_the_config_leaves_no_random_op_and_exports_eval_mode(exports):
    exported = exports.get("ganet_mlp", {"dropout": 0.2}, max_seq=8)
    assert exported.config.dropout == 0.2
    model = exported.load()
    assert not (RANDOM_OPS | {"Dropout"}) & {n.op_type for n in model.graph.node}
    ids, mask = token_batch((5, 3), 5, seed=1)
    assert_close(torch.from_numpy(exported.run(ids, mask)[0]),
                 torch.from_numpy(exported.run(ids, mask)[0]), (0.0, 0.0))


def test_sample_gate_mode_is_refused_with_a_clear_error(exports):
    sample = GANetConfig(aux_hidden=8, gate_mode="sample")
    _, checkpoint = exports.checkpoint("ganet_mlp", ganet=sample)
    target = exports.root / "sample.onnx"
    with pytest.raises(ExportError, match="gate_mode 'sample'.*'threshold'"):
        export_checkpoint(checkpoint, target)
    assert not target.exists()


def test_an_unsupported_opset_is_refused():
    with pytest.raises(ExportError, match="opset 17 is not supported"):
        ExportOptions(opset=17)


# ----------------------------------------------------------------------------- failures


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_a_failed_export_leaves_no_file_and_keeps_a_previous_one(exports, tmp_path, monkeypatch):
    exported = exports.get("ganet_mlp")
    traced = exported.load()  # stands in for the trace: every later stage runs for real
    del traced.functions[:]
    del traced.metadata_props[:]
    raw = traced.SerializeToString()

    def fake_trace(flat, example, dims, names, opset):
        proto = onnx.ModelProto.FromString(raw)
        ops = Counter(n.op_type for n in proto.graph.node if n.domain == "attndeploy")
        return proto, {}, ops, dims.bounds

    monkeypatch.setattr(generic, "_trace", fake_trace)
    monkeypatch.setattr(generic, "function_protos", lambda opset, names=None: [])
    target = tmp_path / "model.onnx"
    with pytest.raises(ExportError, match="without a function body"):
        export_checkpoint(exported.checkpoint, target)
    assert not target.exists() and _leftovers(tmp_path) == []

    monkeypatch.undo()
    monkeypatch.setattr(generic, "_trace", fake_trace)
    target.write_bytes(b"previous")

    def failing_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OutputError, match="disk full"):
        export_checkpoint(exported.checkpoint, target)
    assert target.read_bytes() == b"previous" and _leftovers(tmp_path) == []

    monkeypatch.undo()
    monkeypatch.setattr(generic, "_trace", fake_trace)
    export_checkpoint(exported.checkpoint, target)  # the same pipeline, nothing failing
    assert exporter.read_metadata(target)["variant"] == "ganet" and _leftovers(tmp_path) == []


def test_structure_check_rejects_a_pinned_dim_a_random_op_and_a_missing_function(exports):
    exported = exports.get("ganet_mlp")
    config = exported.config

    pinned = exported.load()
    pinned.graph.output[1].type.tensor_type.shape.dim[1].dim_value = 8  # gates [batch, 8]
    with pytest.raises(ExportError, match="gates: dimension 1 is 8, expected 'seq'"):
        check_structure(pinned, config, inlined=False)

    noisy = exported.load()
    noisy.functions[0].node.append(onnx.helper.make_node("RandomUniform", [], ["noise"]))
    with pytest.raises(ExportError, match="random ops"):
        check_structure(noisy, config, inlined=False)

    bare = exported.load()
    del bare.functions[:]
    with pytest.raises(ExportError, match="without a function body"):
        check_structure(bare, config, inlined=False)

    assert check_structure(exported.load(), config, inlined=False) == exported.result.custom_nodes


def test_a_model_onnxruntime_cannot_run_is_an_export_error(exports):
    model = exports.get("ganet_mlp").load()
    del model.functions[:]  # onnx.checker accepts this; onnxruntime refuses it
    with pytest.raises(ExportError, match="cannot run the exported model"):
        exporter.runtime_check(model, exports.get("ganet_mlp").config, 16, fp16=False)


# ----------------------------------------------------------------------------- timing


def test_every_export_reports_its_stages_and_their_times(exports):
    """The stages add up to the wall time and the CPU time is recorded. How long an export
    takes is a benchmark (benchmarks/latency.py records it), not a test: it depends on the
    machine's load."""
    results = exports.results() or [exports.get("standard").result]
    for result in results:
        stages = result.stages
        assert set(stages) == {"load", "registry", "capture", "translate", "finish",
                               "runtime_check"}
        assert all(seconds >= 0 for seconds in stages.values())
        assert sum(stages.values()) <= result.seconds + 1e-3
        assert result.cpu_seconds > 0
        json.dumps(result.to_json())
