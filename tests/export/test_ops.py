"""Contract tests of the `attndeploy` ONNX ops (docs/ops.md): every function body against PyTorch.

One table of op cases (`CASES`) drives the parity tests: each op runs as a single custom node
with its FunctionProto, symbolic dims, in onnxruntime (all optimizations and none) and in the
ONNX reference evaluator, at several layouts, and is compared with
`attndeploy.variants.functional`. Comparison rule (docs/architecture.md): an element fails only if
|a - b| > atol AND |a - b| > rtol·|b|; discrete outputs (gates) must agree exactly.
"""

from __future__ import annotations

import dataclasses
import functools
import zlib
from collections.abc import Callable

import numpy as np
import onnx
import onnx.inliner
import onnx.reference
import onnxruntime as ort
import pytest
import torch

from attndeploy.errors import ExportError
from attndeploy.variants import functional, op_registry
from attndeploy.variants.api import call_op

HEADS, HEAD_DIM, MODEL_DIM = 2, 4, 6
SCALE = 0.4  # not 1/sqrt(d), so a lost attribute shows
TOLERANCES = {np.float32: (1e-5, 1e-4), np.float16: (1e-2, 1e-2)}  # (atol, rtol)
RUNNERS = ("ort_all", "ort_none", "reference")


# ----------------------------------------------------------------------------- layouts


@dataclasses.dataclass(frozen=True)
class Layout:
    """A batch: per-example count of real tokens (right padding) in sequences of length T."""

    seq: int
    lengths: tuple[int, ...]

    @property
    def batch(self) -> int:
        return len(self.lengths)

    def mask(self) -> np.ndarray:
        return np.arange(self.seq)[None, :] < np.array(self.lengths)[:, None]  # [B, T] bool

    def __str__(self) -> str:
        return f"T{self.seq}-len{'_'.join(map(str, self.lengths))}"


LAYOUTS = (
    Layout(1, (1,)),  # T = 1
    Layout(1, (1, 0)),  # T = 1 with a fully padded row
    Layout(5, (5, 3, 1, 5)),  # odd T, mixed padding
    Layout(6, (6, 0, 2, 4)),  # a fully padded row among padded ones
    Layout(4, (4, 4, 4)),  # no padding at all (the bodies' unpadded fast paths)
)


def gate_logits_for(rng: np.random.Generator, layout: Layout) -> np.ndarray:
    """Logits that exercise every gate rule, one pattern per row (cycled):
    0 mixed signs with exact zeros (closed), 1 all real keys closed with a tie at the maximum
    (rescue -> smallest index), 2 around -30 where sigmoid saturates (all closed, rescue),
    3 mostly open. Padded keys get large positive logits: they must still stay closed."""
    logits = rng.normal(0.0, 2.0, (layout.batch, layout.seq))
    for b in range(layout.batch):
        pattern = b % 4
        if pattern == 0:
            logits[b, ::3] = 0.0
        elif pattern == 1:
            logits[b] = -np.abs(logits[b]) - 0.5
            logits[b, 1::2] = -0.25  # tie at the maximum
        elif pattern == 2:
            logits[b] = -30.0 + rng.uniform(-0.5, 0.5, layout.seq)
        else:
            logits[b] = np.abs(logits[b]) + 0.1
            logits[b, -1] = 0.0
    logits[~layout.mask()] = 5.0
    return logits


# ----------------------------------------------------------------------------- op cases


def _attention_inputs(rng: np.random.Generator, layout: Layout) -> dict[str, np.ndarray]:
    shape = (layout.batch, HEADS, layout.seq, HEAD_DIM)
    return {
        "query": rng.normal(0.0, 1.0, shape),
        "key": rng.normal(0.0, 1.0, shape),
        "value": rng.normal(0.0, 1.0, shape),
        "key_padding_mask": layout.mask(),
    }


def _qvi_weights(rng: np.random.Generator) -> dict[str, np.ndarray]:
    bound = HEAD_DIM**-0.5
    square = (HEADS, HEAD_DIM, HEAD_DIM)
    return {
        "u_weight": rng.uniform(-bound, bound, square),
        "u_bias": rng.normal(0.0, 0.1, (HEADS, HEAD_DIM)),
        "w_weight": rng.uniform(-bound, bound, square),
        "w_bias": rng.normal(0.0, 0.1, (HEADS, HEAD_DIM)),
        "gate_value_weight": rng.uniform(-bound, bound, square),
        "gate_interaction_weight": rng.uniform(-bound, bound, square),
        "gate_bias": 2.0 + rng.normal(0.0, 0.5, (HEADS, HEAD_DIM)),
    }


def qvi_inputs(rng, layout):
    pool = {"pool_weight": rng.normal(0.0, 1.0, (HEADS, HEAD_DIM))}
    return {**_attention_inputs(rng, layout), **_qvi_weights(rng), **pool}


def qvi_pairwise_inputs(rng, layout):
    return {**_attention_inputs(rng, layout), **_qvi_weights(rng)}


def gated_inputs(rng, layout):
    return {**_attention_inputs(rng, layout), "gate_logits": gate_logits_for(rng, layout)}


def gated_pooling_inputs(rng, layout):
    return {
        "values": rng.normal(0.0, 1.0, (layout.batch, layout.seq, MODEL_DIM)),
        "scores": rng.normal(0.0, 2.0, (layout.batch, layout.seq)),
        "key_padding_mask": layout.mask(),
        "gate_logits": gate_logits_for(rng, layout),
    }


def evolving_inputs(rng, layout):
    maps = (layout.batch, HEADS, layout.seq, layout.seq)
    return {
        **_attention_inputs(rng, layout),
        "prev_logits": rng.normal(0.0, 1.0, maps),
        "conv_weight": rng.normal(0.0, 0.3, (HEADS, HEADS, 3, 3)),
        "conv_bias": rng.normal(0.0, 0.1, (HEADS,)),
    }


# ----------------------------------------------------------------------------- causal op inputs
#
# A causal op takes the n new queries against the P cached plus n new keys. The cases below
# cover both calls from one layout: an odd T is a decode step (P = T // 2 cached tokens, the last
# n = T - P queries), an even T a whole sequence (P = 0), so the parity, fp16 and opset tests
# run prefill and decode alike. The mask is the layout's (right padding: a short row's last
# queries are pads, which read only themselves).


def _past(layout: Layout) -> int:
    """P, the cached tokens: T // 2 for an odd T (a decode step), 0 for an even T."""
    return layout.seq // 2 if layout.seq % 2 else 0


def _causal_attention_inputs(rng: np.random.Generator, layout: Layout) -> dict[str, np.ndarray]:
    """query [B,H,n,d] for the last n = T - P keys; key, value [B,H,T,d]; mask [B,T]."""
    inputs = _attention_inputs(rng, layout)
    inputs["query"] = inputs["query"][:, :, _past(layout):]  # [B, H, n, d]
    return inputs


def qvi_prefix_inputs(rng, layout):
    """The new tokens' values only; a decode step starts from a random cached state, a whole
    sequence from the empty one (P = 0; its running maximum the most negative finite fp16
    value, finite in every T, where fp32's would become -inf in fp16)."""
    past = _past(layout)
    inputs = _causal_attention_inputs(rng, layout)
    inputs["value"] = inputs["value"][:, :, past:]  # [B, H, n, d]
    batch = layout.batch
    if past == 0:
        state = {
            "past_values": np.zeros((batch, HEADS, 0, HEAD_DIM)),
            "prefix_max": np.full((batch, HEADS), -65504.0),
            "prefix_den": np.zeros((batch, HEADS)),
            "prefix_num": np.zeros((batch, HEADS, HEAD_DIM)),
        }
    else:
        state = {
            "past_values": rng.normal(0.0, 1.0, (batch, HEADS, past, HEAD_DIM)),
            "prefix_max": rng.normal(0.0, 1.0, (batch, HEADS)),
            "prefix_den": 1.0 + past * rng.uniform(0.0, 1.0, (batch, HEADS)),
            "prefix_num": rng.normal(0.0, 1.0, (batch, HEADS, HEAD_DIM)),
        }
    pool = {"pool_weight": rng.normal(0.0, 1.0, (HEADS, HEAD_DIM))}
    return {**inputs, **state, **_qvi_weights(rng), **pool}


def qvi_causal_pairwise_inputs(rng, layout):
    return {**_causal_attention_inputs(rng, layout), **_qvi_weights(rng)}


def causal_gated_inputs(rng, layout):
    """The gate patterns of `gate_logits_for`; a cached slot's logit is positive (it was open
    when cached), its mask says whether it holds a token."""
    logits = gate_logits_for(rng, layout)
    logits[:, : _past(layout)] = 1.0
    return {**_causal_attention_inputs(rng, layout), "gate_logits": logits}


def causal_evolving_inputs(rng, layout):
    """prev_logits: the queries' rows [B,H,n,T]; past_rows [B,H,2,T]: zeros for a whole
    sequence, else the two rows above the first query, zero after each row's own position."""
    past = _past(layout)
    rows = rng.normal(0.0, 1.0, (layout.batch, HEADS, 2, layout.seq))
    own = np.array([past - 2, past - 1])[:, None]  # [2, 1]: the rows' positions
    rows = np.where(np.arange(layout.seq)[None, :] <= own, rows, 0.0)  # [B, H, 2, T]
    return {
        **_causal_attention_inputs(rng, layout),
        "prev_logits": rng.normal(0.0, 1.0, (layout.batch, HEADS, layout.seq - past, layout.seq)),
        "past_rows": rows,
        "conv_weight": rng.normal(0.0, 0.3, (HEADS, HEADS, 3, 3)),
        "conv_bias": rng.normal(0.0, 0.1, (HEADS,)),
    }


ATTENTION_DIMS = {
    "query": "B H T d", "key": "B H T d", "value": "B H T d", "key_padding_mask": "B T",
    "output": "B H T d",
}
QVI_DIMS = {
    **ATTENTION_DIMS, "u_weight": "H d d", "u_bias": "H d", "w_weight": "H d d", "w_bias": "H d",
    "gate_value_weight": "H d d", "gate_interaction_weight": "H d d", "gate_bias": "H d",
    "pool_weight": "H d",
}


# Causal ops: n new queries, T = P + n keys (cached, then new), N open new tokens (GA-Net).
CAUSAL_DIMS = {**ATTENTION_DIMS, "query": "B H n d", "output": "B H n d"}
QVI_CAUSAL_DIMS = {**QVI_DIMS, **CAUSAL_DIMS}


@dataclasses.dataclass(frozen=True)
class OpCase:
    """One op under test: its inputs, attributes, reference and symbolic dims."""

    op: str  # ONNX op name (docs/ops.md)
    make_inputs: Callable[[np.random.Generator, Layout], dict[str, np.ndarray]]
    dims: dict[str, str]  # input/output name -> symbolic dims, e.g. "B H T d"
    attributes: dict[str, float] = dataclasses.field(default_factory=dict)
    discrete: tuple[str, ...] = ()  # outputs that must agree exactly
    # Why onnx.reference cannot run the FunctionProto as is; it then runs the same body after
    # `onnx.inliner.inline_local_functions` (attribute references replaced by their values).
    reference_inlines_because: str = ""

    @property
    def spec(self) -> op_registry.OpSpec:
        return op_registry.op_spec(self.op)

    def reference(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The functional reference in fp32 on the same (possibly fp16-rounded) inputs."""
        spec = self.spec
        args = [torch.from_numpy(_fp32(inputs[name])) for name in spec.input_names]
        with torch.no_grad():
            result = spec.reference(*args, **self.attributes)
        results = result if isinstance(result, tuple) else (result,)
        return {name: r.numpy() for name, r in zip(spec.output_names, results, strict=True)}

    def __str__(self) -> str:
        return self.op


CASES = (
    OpCase("QVIAttention", qvi_inputs, QVI_DIMS, {"scale": SCALE}),
    OpCase("QVIPairwiseAttention", qvi_pairwise_inputs, QVI_DIMS, {"scale": SCALE}),
    OpCase(
        "GatedAttention", gated_inputs, {**ATTENTION_DIMS, "gate_logits": "B T", "gates": "B T"},
        {"scale": SCALE}, discrete=("gates",),
    ),
    OpCase(
        "GatedAttentionPooling", gated_pooling_inputs,
        {"values": "B T D", "scores": "B T", "key_padding_mask": "B T", "gate_logits": "B T",
         "context": "B D", "gates": "B T"},
        discrete=("gates",),
    ),
    OpCase(
        "BudgetGatedAttention", gated_inputs,
        {**ATTENTION_DIMS, "gate_logits": "B T", "gates": "B T"},
        {"scale": SCALE, "budget": 0.4}, discrete=("gates",),
    ),
    OpCase(
        "EvolvingAttentionStart", _attention_inputs, {**ATTENTION_DIMS, "logits": "B H T T"},
        {"scale": SCALE},
    ),
    OpCase(
        "EvolvingAttention", evolving_inputs,
        {**ATTENTION_DIMS, "prev_logits": "B H T T", "conv_weight": "H H 3 3",
         "conv_bias": "H", "logits": "B H T T"},
        {"scale": SCALE, "alpha": 0.3, "beta": 0.7, "negative_slope": 0.01},
    ),
    OpCase(
        "QVIPrefixAttention", qvi_prefix_inputs,
        {**QVI_CAUSAL_DIMS, "value": "B H n d", "past_values": "B H P d", "prefix_max": "B H",
         "prefix_den": "B H", "prefix_num": "B H d", "values": "B H T d", "present_max": "B H",
         "present_den": "B H", "present_num": "B H d"},
        {"scale": SCALE},
    ),
    OpCase("QVICausalPairwiseAttention", qvi_causal_pairwise_inputs, QVI_CAUSAL_DIMS,
           {"scale": SCALE}),
    OpCase(
        "CausalGatedAttention", causal_gated_inputs,
        {**CAUSAL_DIMS, "gate_logits": "B T", "gates": "B T", "open_keys": "B H N d",
         "open_values": "B H N d", "open_slots": "B N"},
        {"scale": SCALE}, discrete=("gates", "open_slots"),
    ),
    OpCase(
        "CausalEvolvingAttentionStart", _causal_attention_inputs,
        {**CAUSAL_DIMS, "logits": "B H n T"}, {"scale": SCALE},
    ),
    OpCase(
        "CausalEvolvingAttention", causal_evolving_inputs,
        {**CAUSAL_DIMS, "prev_logits": "B H n T", "past_rows": "B H 2 T",
         "conv_weight": "H H 3 3", "conv_bias": "H", "logits": "B H n T", "rows": "B H 2 T"},
        {"scale": SCALE, "alpha": 0.3, "beta": 0.7, "negative_slope": 0.01},
    ),
)
CASE_BY_OP = {case.op: case for case in CASES}


# ----------------------------------------------------------------------------- helpers


def _fp32(array: np.ndarray) -> np.ndarray:
    return array.astype(np.float32) if array.dtype.kind == "f" else array


def _cast_inputs(inputs: dict[str, np.ndarray], dtype: type) -> dict[str, np.ndarray]:
    return {k: v.astype(dtype) if v.dtype.kind == "f" else v for k, v in inputs.items()}


def single_node_model(case: OpCase, dtype: type, opset: int = op_registry.DEFAULT_OPSET):
    """The op as one custom node plus its FunctionProto; every dim symbolic except literals."""
    spec = case.spec
    float_type = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))

    def value_info(formal: onnx.defs.OpSchema.FormalParameter) -> onnx.ValueInfoProto:
        elem = onnx.TensorProto.BOOL if formal.type_str == "tensor(bool)" else float_type
        dims = [int(d) if d.isdigit() else d for d in case.dims[formal.name].split()]
        return onnx.helper.make_tensor_value_info(formal.name, elem, dims)

    node = onnx.helper.make_node(
        spec.name, list(spec.input_names), list(spec.output_names), domain="attndeploy",
        **case.attributes,
    )
    graph = onnx.helper.make_graph(
        [node], spec.name,
        [value_info(p) for p in spec.schema.inputs],
        [value_info(p) for p in spec.schema.outputs],
    )
    model = onnx.helper.make_model(
        graph,
        opset_imports=[
            onnx.helper.make_opsetid("", opset), onnx.helper.make_opsetid("attndeploy", 1)
        ],
        functions=[spec.function_proto(opset)],
        ir_version=10,
    )
    onnx.checker.check_model(model, full_check=True)
    return model


@functools.cache
def runner(op: str, runner_name: str, dtype: type, opset: int = op_registry.DEFAULT_OPSET):
    """`infer(feed) -> list of outputs` for one op, built once per (op, runner, dtype, opset)."""
    return make_runner(CASE_BY_OP[op], runner_name, dtype, opset)


def make_runner(case: OpCase, runner_name: str, dtype: type, opset: int = 18):
    """`infer(feed) -> list of outputs` for one case (its attributes), not cached."""
    model = single_node_model(case, dtype, opset)
    if runner_name == "reference":
        if case.reference_inlines_because:
            model = onnx.inliner.inline_local_functions(model)
        evaluator = onnx.reference.ReferenceEvaluator(model)
        return lambda feed: evaluator.run(None, feed)
    options = ort.SessionOptions()
    options.log_severity_level = 3  # fp16 on CPU logs constant-folding warnings (see fp16 test)
    options.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL if runner_name == "ort_all"
        else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    )
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return lambda feed: session.run(None, feed)


def compare(case: OpCase, got: list[np.ndarray], want: dict[str, np.ndarray], dtype: type):
    """Every output compared, all mismatches collected, then one assertion."""
    atol, rtol = TOLERANCES[dtype]
    failures = []
    for name, actual in zip(case.spec.output_names, got, strict=True):
        expected = want[name]
        if actual.shape != expected.shape:
            failures.append(f"{name}: shape {actual.shape} != {expected.shape}")
            continue
        if name in case.discrete:
            flips = int((actual != expected).sum())
            if flips:
                failures.append(f"{name}: {flips} flips\n got {actual}\nwant {expected}")
            continue
        actual = actual.astype(np.float32)
        if not np.isfinite(actual).all():
            failures.append(f"{name}: {int((~np.isfinite(actual)).sum())} non-finite values")
            continue
        diff = np.abs(actual - expected)
        bad = (diff > atol) & (diff > rtol * np.abs(expected))
        if bad.any():
            failures.append(
                f"{name}: {int(bad.sum())}/{bad.size} elements off, max abs err {diff.max():.3g}"
            )
    assert not failures, "\n".join(failures)


def _op_types(graph_nodes) -> list[str]:
    """Op types of the nodes, subgraphs (If branches) included."""
    found = []
    for node in graph_nodes:
        found.append(node.op_type)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                found += _op_types(attr.g.node)
    return found


def run_case(
    case: OpCase, layout: Layout, runner_name: str, dtype: type, opset: int = 18, infer=None
):
    rng = np.random.default_rng(zlib.crc32(f"{case.op}/{layout}".encode()))
    inputs = _cast_inputs(case.make_inputs(rng, layout), dtype)
    got = (infer or runner(case.op, runner_name, dtype, opset))(inputs)
    compare(case, got, case.reference(inputs), dtype)


# ----------------------------------------------------------------------------- structure


def test_every_op_has_a_functional_reference_and_a_case():
    for spec in op_registry.op_specs():
        assert getattr(functional, spec.functional_name) is spec.reference
        assert op_registry.op_spec(spec.reference) is spec
    assert {spec.name for spec in op_registry.op_specs()} == set(CASE_BY_OP)


def test_op_names_and_signatures_follow_ops_md():
    expected = {
        "QVIAttention": ("output",),
        "QVIPairwiseAttention": ("output",),
        "GatedAttention": ("output", "gates"),
        "GatedAttentionPooling": ("context", "gates"),
        "BudgetGatedAttention": ("output", "gates"),
        "EvolvingAttentionStart": ("output", "logits"),
        "EvolvingAttention": ("output", "logits"),
        "QVIPrefixAttention": ("output", "values", "present_max", "present_den", "present_num"),
        "QVICausalPairwiseAttention": ("output",),
        "CausalGatedAttention": ("output", "gates", "open_keys", "open_values", "open_slots"),
        "CausalEvolvingAttentionStart": ("output", "logits"),
        "CausalEvolvingAttention": ("output", "logits", "rows"),
    }
    assert {spec.name: spec.output_names for spec in op_registry.op_specs()} == expected
    assert op_registry.op_spec("EvolvingAttention").attributes == (
        "scale", "alpha", "beta", "negative_slope"
    )
    assert op_registry.op_spec("GatedAttentionPooling").attributes == ()
    for spec in op_registry.op_specs():
        assert spec.schema.domain == "attndeploy" and spec.schema.since_version == 1
        assert spec.torch_op is getattr(torch.ops.attndeploy, spec.functional_name).default


def test_unknown_op_name_lists_the_valid_ones():
    with pytest.raises(ExportError, match="valid: QVIAttention"):
        op_registry.op_spec("QVIAttentionV2")


@pytest.mark.parametrize("opset", op_registry.SUPPORTED_OPSETS)
def test_function_bodies_use_standard_onnx_ops_at_the_model_opset(opset):
    protos = op_registry.function_protos(opset)
    assert [(f.domain, f.name) for f in protos] == [
        ("attndeploy", spec.name) for spec in op_registry.op_specs()
    ]
    for proto in protos:
        assert {n.domain for n in proto.node} == {""}, proto.name
        assert [(o.domain, o.version) for o in proto.opset_import] == [("", opset)]
        assert proto.doc_string.startswith(proto.name + "(")


def test_function_protos_can_be_limited_to_the_ops_a_model_uses():
    protos = op_registry.function_protos(18, names=["GatedAttentionPooling", "gated_attention"])
    assert [f.name for f in protos] == ["GatedAttention", "GatedAttentionPooling"]


def test_an_unsupported_opset_is_refused():
    with pytest.raises(ExportError, match="opset 17 is not supported"):
        op_registry.function_protos(17)


def test_gated_attention_gathers_open_keys_and_never_decides_on_sigmoid():
    body = op_registry.op_spec("GatedAttention").function_proto()
    op_types = [n.op_type for n in body.node]
    assert "TopK" in op_types and op_types.count("GatherND") == 2  # keys and values, by row
    gather_nd = [n for n in body.node if n.op_type == "GatherND"]
    assert all(a.i == 2 for n in gather_nd for a in n.attribute if a.name == "batch_dims")
    assert "Sigmoid" not in op_types
    assert "Sigmoid" not in [n.op_type for n in op_registry.op_spec("GatedAttentionPooling")
                             .function_proto().node]


def test_gated_layers_sharing_gate_logits_compute_the_gates_once_in_onnxruntime(tmp_path):
    """Two GatedAttention nodes and the pooling read one gate vector (as in a GA-Net model):
    after inlining, onnxruntime's common-subexpression elimination leaves one gate decision
    and one TopK, because the body derives them from gate_logits and the mask alone."""
    spec = op_registry.op_spec("GatedAttention")
    pooling = op_registry.op_spec("GatedAttentionPooling")
    f32, boolean = onnx.TensorProto.FLOAT, onnx.TensorProto.BOOL
    inputs = [
        onnx.helper.make_tensor_value_info(f"{n}{i}", f32, ["B", HEADS, "T", HEAD_DIM])
        for i in range(2) for n in ("q", "k", "v")
    ] + [
        onnx.helper.make_tensor_value_info("values", f32, ["B", "T", MODEL_DIM]),
        onnx.helper.make_tensor_value_info("scores", f32, ["B", "T"]),
        onnx.helper.make_tensor_value_info("mask", boolean, ["B", "T"]),
        onnx.helper.make_tensor_value_info("gate_logits", f32, ["B", "T"]),
    ]
    nodes = [
        onnx.helper.make_node(
            "GatedAttention", [f"q{i}", f"k{i}", f"v{i}", "mask", "gate_logits"],
            [f"out{i}", f"gates{i}"], domain="attndeploy", scale=SCALE,
        )
        for i in range(2)
    ] + [
        onnx.helper.make_node(
            "GatedAttentionPooling", ["values", "scores", "mask", "gate_logits"],
            ["context", "gates_pool"], domain="attndeploy",
        )
    ]
    outputs = [onnx.helper.make_tensor_value_info(n, f32, None) for n in ("out0", "out1")] + [
        onnx.helper.make_tensor_value_info("context", f32, None)
    ]
    model = onnx.helper.make_model(
        onnx.helper.make_graph(nodes, "two_layers", inputs, outputs),
        opset_imports=[onnx.helper.make_opsetid("", 18), onnx.helper.make_opsetid("attndeploy", 1)],
        functions=[spec.function_proto(), pooling.function_proto()], ir_version=10,
    )
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    op_types = _op_types(onnx.load(options.optimized_model_filepath).graph.node)
    assert op_types.count("ArgMax") == 1 and op_types.count("TopK") == 1
    assert op_types.count("GatherND") == 4


def test_masked_softmax_uses_the_most_negative_finite_value_not_inf():
    def constants(nodes):  # every tensor/float attribute, If branches included
        for node in nodes:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    yield from constants(attr.g.node)
                elif attr.type == onnx.AttributeProto.TENSOR:
                    yield onnx.numpy_helper.to_array(attr.t)
                elif attr.type == onnx.AttributeProto.FLOAT:
                    yield np.float32(attr.f)

    for proto in op_registry.function_protos():
        values = list(constants(proto.node))
        assert all(np.isfinite(v).all() for v in values), proto.name
        if "Softmax" in _op_types(proto.node):
            assert any((v == np.float32(-3.4028234663852886e38)).any() for v in values), proto.name


# ----------------------------------------------------------------------------- torch ops


@pytest.mark.parametrize("case", CASES, ids=str)
def test_torch_custom_op_and_its_fake_pass_opcheck(case):
    inputs = _cast_inputs(case.make_inputs(np.random.default_rng(4), LAYOUTS[3]), np.float32)
    args = tuple(torch.from_numpy(inputs[name]) for name in case.spec.input_names)
    torch.library.opcheck(case.spec.torch_op, args, dict(case.attributes))


# ----------------------------------------------------------------------------- parity


@pytest.mark.parametrize("runner_name", RUNNERS)
@pytest.mark.parametrize("layout", LAYOUTS, ids=str)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_op_body_matches_the_functional_reference_fp32(case, layout, runner_name):
    run_case(case, layout, runner_name, np.float32)


@pytest.mark.parametrize("runner_name", RUNNERS)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_op_body_in_fp16_matches_the_fp32_reference(case, runner_name):
    """T = float16 end to end (inputs, outputs, constants via CastLike), against the fp32
    reference on the same fp16-rounded inputs. onnxruntime's CPU provider has no fp16 kernel for
    MatMul, Add, Mul, Sub, Conv, ...: its InsertCastTransformer runs those nodes in fp32, so
    this checks that the fp16 graph is well typed and accurate, not fp16 arithmetic (that needs
    the CUDA provider). onnx.reference computes in fp16 (numpy)."""
    run_case(case, LAYOUTS[2], runner_name, np.float16)
    run_case(case, LAYOUTS[3], runner_name, np.float16)


@pytest.mark.parametrize("opset", op_registry.SUPPORTED_OPSETS)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_op_runs_in_onnxruntime_at_every_supported_opset(case, opset):
    run_case(case, LAYOUTS[3], "ort_all", np.float32, opset)


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("runner_name", RUNNERS)
@pytest.mark.parametrize("alpha, beta", [(0.3, 1.0), (0.0, 1.0), (1.0, 0.0), (0.5, 0.0)])
def test_evolving_attention_at_edge_weights_matches_the_reference(alpha, beta, runner_name, dtype):
    """beta = 1 takes the body's conv-only branch (an If on the attribute, which onnxruntime
    folds away); alpha 0/1 and beta 0 reach the ends of the mixing and residual weights."""
    base = CASE_BY_OP["EvolvingAttention"]
    case = dataclasses.replace(base, attributes={**base.attributes, "alpha": alpha, "beta": beta})
    infer = make_runner(case, runner_name, dtype)
    layouts = LAYOUTS if dtype is np.float32 else LAYOUTS[2:]
    for layout in layouts:
        run_case(case, layout, runner_name, dtype, infer=infer)


def test_evolving_attention_zeroes_the_pads_of_the_score_maps_twice_and_only_when_padded():
    """Z(alpha·prev) + Z((1-alpha)·S) is written as one Z of the mix, so the body holds two
    [B, H, T, T] Wheres (A_in and A), each in the body of a Loop that runs only for a padded
    batch (an unpadded batch skips them: Z is the identity), plus the small additive-mask Where
    of the softmax."""
    body = op_registry.op_spec("EvolvingAttention").function_proto()
    top = [n.op_type for n in body.node]
    assert "Where" not in top and top.count("Loop") == 2  # the 2 ZeroPads
    assert top.count("If") == 3  # the activation (on negative_slope), beta, MaskedSoftmax
    assert _op_types(body.node).count("Where") == 3


def test_evolving_attention_body_folds_the_conv_only_branch_in_onnxruntime(tmp_path):
    base = CASE_BY_OP["EvolvingAttention"]
    op_types = {}
    for beta in (1.0, 0.7):
        case = dataclasses.replace(base, attributes={**base.attributes, "beta": beta})
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(tmp_path / f"beta{beta}.onnx")
        ort.InferenceSession(
            single_node_model(case, np.float32).SerializeToString(), options,
            providers=["CPUExecutionProvider"],
        )
        op_types[beta] = [n.op_type for n in onnx.load(options.optimized_model_filepath).graph.node]
    # the Ifs on beta and on the slope are gone; what is left checks for padding at run time
    # (the 2 ZeroPads' Loops, the softmax mask's If)
    for types in op_types.values():
        assert types.count("If") == 1 and types.count("Loop") == 2
    # the general branch keeps beta·C + (1 - beta)·A_in; the conv-only branch does not
    assert op_types[0.7].count("Mul") > op_types[1.0].count("Mul")


def test_hard_gates_open_the_largest_logit_when_all_closed():
    # row 0: all closed, tie at -0.5 between positions 1 and 3 -> position 1 opens;
    # row 1: a pad with the largest logit never opens; row 2: no real key -> position 0.
    logits = np.array([[-2.0, -0.5, -1.0, -0.5], [-3.0, -1.0, 9.0, 9.0], [4.0, 4.0, 4.0, 4.0]])
    mask = np.array([[1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0]], dtype=bool)
    want = np.array([[0, 1, 0, 0], [0, 1, 0, 0], [1, 0, 0, 0]], dtype=bool)
    case = CASE_BY_OP["GatedAttentionPooling"]
    rng = np.random.default_rng(0)
    feed = {
        "values": rng.normal(size=(3, 4, MODEL_DIM)).astype(np.float32),
        "scores": rng.normal(size=(3, 4)).astype(np.float32),
        "key_padding_mask": mask,
        "gate_logits": logits.astype(np.float32),
    }
    for runner_name in RUNNERS:
        context, gates = runner(case.op, runner_name, np.float32)(feed)
        np.testing.assert_array_equal(gates, want, err_msg=runner_name)
        # one open key: the context is exactly that key's value
        np.testing.assert_allclose(context, feed["values"][want], rtol=1e-6, err_msg=runner_name)


def test_exact_zero_logit_is_closed_and_saturated_logits_still_decide():
    logits = np.array([[0.0, 1e-6, -30.2, -29.9], [-30.0, -29.5, -29.75, -31.0]], np.float32)
    want = np.array([[0, 1, 0, 0], [0, 1, 0, 0]], dtype=bool)
    inputs = _cast_inputs(
        _attention_inputs(np.random.default_rng(1), Layout(4, (4, 4))), np.float32
    )
    inputs["gate_logits"] = logits
    for runner_name in RUNNERS:
        output, gates = runner("GatedAttention", runner_name, np.float32)(inputs)
        np.testing.assert_array_equal(gates, want, err_msg=runner_name)


# ----------------------------------------------------------------------------- export


class TinyGatedBlock(torch.nn.Module):
    """Head split, one `gated_attention` call through `call_op`, head merge."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor, gate_logits: torch.Tensor):
        batch, seq, _ = x.shape
        heads = x.reshape(batch, seq, HEADS, HEAD_DIM).transpose(1, 2)  # [B, H, T, d]
        output, gates = call_op(
            functional.gated_attention, heads, heads * 0.5, heads + 1.0, mask, gate_logits,
            gather_open_keys=True,
        )  # [B, H, T, d], [B, T]
        return output.transpose(1, 2).reshape(batch, seq, HEADS * HEAD_DIM), gates  # [B, T, D]


def test_export_call_resolves_the_default_scale_and_drops_torch_only_keywords():
    layout = Layout(5, (5, 2))
    inputs = {k: torch.from_numpy(v) for k, v in
              _cast_inputs(gated_inputs(np.random.default_rng(2), layout), np.float32).items()}
    args = [inputs[name] for name in op_registry.op_spec("gated_attention").input_names]
    want = functional.gated_attention(*args)
    export_call = op_registry.op_spec(functional.gated_attention).export_call
    got = export_call(*args, gather_open_keys=True)
    torch.testing.assert_close(got, want)
    with pytest.raises(TypeError, match="unexpected keyword"):
        export_call(*args, alpha=0.5)


@pytest.mark.slow
@pytest.mark.parametrize("opset", [18, 23])
def test_exported_module_keeps_one_custom_node_with_its_function_and_symbolic_dims(opset):
    model = TinyGatedBlock().eval()
    layout = Layout(5, (5, 3))
    rng = np.random.default_rng(3)
    example = (
        torch.randn(layout.batch, layout.seq, HEADS * HEAD_DIM),
        torch.from_numpy(layout.mask()),
        torch.from_numpy(gate_logits_for(rng, layout).astype(np.float32)),
    )
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
    program = torch.onnx.export(  # call_op runs the custom op while torch.export traces
        model, example, dynamo=True, opset_version=opset,
        custom_translation_table=op_registry.custom_translation_table(),
        input_names=["x", "mask", "gate_logits"], output_names=["y", "gates"],
        dynamic_shapes=({0: batch, 1: seq}, {0: batch, 1: seq}, {0: batch, 1: seq}),
    )
    proto = program.model_proto
    custom = [n for n in proto.graph.node if n.domain == "attndeploy"]
    assert [n.op_type for n in custom] == ["GatedAttention"]
    assert {a.name: a.f for a in custom[0].attribute} == pytest.approx({"scale": HEAD_DIM**-0.5})
    assert not proto.functions  # the exporter kept the node opaque
    proto.functions.extend(op_registry.function_protos(opset))
    assert {(o.domain, o.version) for o in proto.opset_import} >= {("", opset), ("attndeploy", 1)}
    onnx.checker.check_model(proto, full_check=True)
    for value in [*proto.graph.input, *proto.graph.output]:
        dims = value.type.tensor_type.shape.dim
        assert dims[0].dim_param and dims[1].dim_param, f"{value.name} lost a symbolic dim"

    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    other = Layout(7, (7, 4, 1))  # not the export shapes
    x = torch.randn(other.batch, other.seq, HEADS * HEAD_DIM)
    mask = torch.from_numpy(other.mask())
    logits = torch.from_numpy(gate_logits_for(rng, other).astype(np.float32))
    y, gates = session.run(None, {"x": x.numpy(), "mask": mask.numpy(),
                                  "gate_logits": logits.numpy()})
    with torch.no_grad():
        want_y, want_gates = model(x, mask, logits)
    np.testing.assert_array_equal(gates, want_gates.numpy())
    np.testing.assert_allclose(y, want_y.numpy(), atol=1e-5, rtol=1e-4)
