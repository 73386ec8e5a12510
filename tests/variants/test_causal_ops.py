"""The causal ops' bodies (issue #49, docs/variants.md §6 C10): every causal op of the set
run as a single-node model in onnxruntime (fp32 and fp16) and the ONNX reference evaluator
equals its PyTorch reference, whole sequences and decode steps alike; a layer's whole
sequence equals its op reference; the torch ops pass opcheck. The layers' causality and
cache are tests/variants/test_causal.py's."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.inliner
import onnx.reference
import onnxruntime as ort
import pytest
import torch

from attndeploy.variants import op_registry
from tests.variants.causal_cases import (
    CAUSAL_CASES,
    FP32_TOLERANCE,
    REF_CASES,
    left_padded,
)
from tests.variants.test_causal import BATCH, SEQ, _assert_close, _inputs, _run_reference

CASES = [pytest.param(case, id=case.id) for case in CAUSAL_CASES]


# ----------------------------------------------------------------------------- op bodies


def _causal_specs() -> list[op_registry.OpSpec]:
    """The causal ops: those each registered variant's `ops.CAUSAL_OPS` names (optional in a
    plug-in's `ops.py`), every one of them also an op of the set (docs/ops.md)."""
    import importlib

    from attndeploy.variants.registry import variant_specs

    return [spec for variant in variant_specs() if variant.ops is not None
            for spec in getattr(importlib.import_module(variant.ops), "CAUSAL_OPS", ())]


def _spec(op: str) -> op_registry.OpSpec:
    return op_registry.op_spec(op)


def _single_node_model(spec, attributes: dict[str, float], ranks: dict[str, int],
                       float_type: int = onnx.TensorProto.FLOAT) -> onnx.ModelProto:
    """The op as one custom node with its FunctionProto; every dim symbolic."""
    def info(formal) -> onnx.ValueInfoProto:
        boolean = formal.type_str == "tensor(bool)"
        elem = onnx.TensorProto.BOOL if boolean else float_type
        dims = [f"{formal.name}_{axis}" for axis in range(ranks[formal.name])]
        return onnx.helper.make_tensor_value_info(formal.name, elem, dims)

    node = onnx.helper.make_node(spec.name, list(spec.input_names), list(spec.output_names),
                                 domain="attndeploy", **attributes)
    graph = onnx.helper.make_graph([node], spec.name, [info(p) for p in spec.schema.inputs],
                                   [info(p) for p in spec.schema.outputs])
    model = onnx.helper.make_model(
        graph, functions=[spec.function_proto(18)], ir_version=10,
        opset_imports=[onnx.helper.make_opsetid("", 18), onnx.helper.make_opsetid("attndeploy", 1)],
    )
    onnx.checker.check_model(model, full_check=True)
    return model


LAYOUTS = {  # (batch, Tq, Tk)
    "whole-T1": (1, 1, 1),
    "whole-T7": (BATCH, 7, 7),
    "decode-1": (BATCH, 1, 6),
    "decode-3": (BATCH, 3, 8),
}


@pytest.mark.parametrize("runner", ["onnxruntime", "reference", "onnxruntime-fp16"])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("name", [n for n in sorted(REF_CASES) if n != "standard"])
def test_op_body_equals_its_pytorch_reference(name, layout, runner):
    ref = REF_CASES[name]
    batch, t_q, t_k = LAYOUTS[layout]
    spec = _spec(ref.op)
    inputs = ref.inputs(torch.Generator().manual_seed(3), batch, t_q, t_k)
    fp16 = runner.endswith("fp16")
    if fp16:  # the reference in fp32 on the fp16-rounded inputs
        inputs = {k: v.half().float() if v.is_floating_point() else v for k, v in inputs.items()}
    want = _run_reference(ref, inputs)
    ranks = {name: value.dim() for name, value in inputs.items()}
    ranks.update({name: value.dim() for name, value in zip(spec.output_names, want, strict=True)})
    model = _single_node_model(spec, ref.attributes, ranks,
                               onnx.TensorProto.FLOAT16 if fp16 else onnx.TensorProto.FLOAT)
    feed = {k: (v.half() if fp16 and v.is_floating_point() else v).numpy()
            for k, v in inputs.items()}
    if runner.startswith("onnxruntime"):
        options = ort.SessionOptions()
        options.log_severity_level = 3  # fp16 on CPU logs constant-folding warnings
        session = ort.InferenceSession(model.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        got = session.run(None, feed)
    else:
        # onnx.reference cannot bind attribute references inside a function's If branches;
        # inlining replaces them by their values (tests/export/test_ops.py does the same).
        got = onnx.reference.ReferenceEvaluator(onnx.inliner.inline_local_functions(model)).run(
            None, feed)
    for out_name, actual, expected in zip(spec.output_names, got, want, strict=True):
        if out_name in ref.discrete:
            assert np.array_equal(actual, expected.numpy()), f"{out_name} differs"
        else:
            actual = torch.from_numpy(np.asarray(actual).astype(np.float32))
            _assert_close(actual, expected, f"{name} {out_name}", 1e-2 if fp16 else FP32_TOLERANCE)


def test_every_causal_op_is_an_op_of_the_set_with_a_reference_case():
    causal = _causal_specs()
    assert {spec.name for spec in causal} == {
        ref.op for ref in REF_CASES.values() if ref.op != "CausalAttention"
    }
    assert set(causal) <= set(op_registry.op_specs()), "a causal op outside the op set"


@pytest.mark.parametrize("case", CASES)
def test_a_layers_whole_sequence_equals_its_op_reference(case):
    """The layer's prefill path is the op's reference (the path export takes)."""
    stack = case.stack()
    layer = stack.layers[0]
    x = _inputs()
    mask = left_padded(BATCH, SEQ)
    with torch.no_grad():
        q, k, v = layer.project(x)
        if case.variant == "ganet":
            logits, _ = stack.gate_network(x, mask)
            got = layer(x, mask, logits).output
            heads, *_ = REF_CASES["ganet"].reference(q, k, v, mask, logits, scale=layer.scale)
        elif case.variant == "evolving":
            got = layer(x, mask, None).output
            heads, _ = REF_CASES["evolving-start"].reference(q, k, v, mask, scale=layer.scale)
        elif case.id == "qvi-prefix":
            got = layer(x, mask).output
            from attndeploy.variants.qvi.reference import empty_prefix_state

            heads, *_ = REF_CASES["qvi-prefix"].reference(
                q, k, v, mask, *empty_prefix_state(q), *layer._weights(), layer.pool_weight,
                scale=layer.scale,
            )
        elif case.variant == "qvi":
            got = layer(x, mask).output
            heads = REF_CASES["qvi-pairwise"].reference(q, k, v, mask, *layer._weights(),
                                                        scale=layer.scale)
        else:
            got = layer(x, mask).output
            heads = REF_CASES["standard"].reference(q, k, v, mask, scale=layer.scale)
    _assert_close(got, layer.merge(heads), case.id)


@pytest.mark.parametrize("name", [n for n in sorted(REF_CASES) if n != "standard"])
def test_each_causal_torch_op_passes_opcheck(name):
    """The torch custom op (what export traces) agrees with its fake and its schema, for a
    whole sequence and a decode step."""
    ref = REF_CASES[name]
    torch_op = _spec(ref.op).torch_op
    for batch, t_q, t_k in ((2, 5, 5), (2, 2, 6)):
        inputs = ref.inputs(torch.Generator().manual_seed(5), batch, t_q, t_k)
        torch.library.opcheck(torch_op, tuple(inputs.values()), dict(ref.attributes),
                              test_utils=("test_schema", "test_faketensor"))
