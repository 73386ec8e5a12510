"""The op bodies as shipped, for the tools that rewrite or re-implement them.

- Control flow reads only what its node depends on through explicit inputs (ops/_common.py):
  onnxruntime's transformer optimizer orders nodes by explicit inputs alone. The exception is an
  If on an attribute-only condition, which onnxruntime folds before any other pass.
- Every branch of EvolvingAttention's activation (ReLU, slope <= 1, slope > 1) and of its beta
  runs in onnx.reference on the FunctionProto as shipped and in onnxruntime, equal to PyTorch.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest

from attndeploy.variants import op_registry
from tests.export.test_ops import CASE_BY_OP, LAYOUTS, make_runner, run_case

CONTROL_FLOW = ("If", "Loop", "Scan")
# docs/ops.md's attributes decide these Ifs: onnxruntime keeps only the taken branch at load time.
# LeakyRelu slope, beta = 1
ATTRIBUTE_CONDITIONS = {"EvolvingAttention": 2, "CausalEvolvingAttention": 2}


def _graphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    graphs = []
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            graphs.append(attr.g)
        graphs.extend(attr.graphs)
    return graphs


def _outer_reads(graph: onnx.GraphProto) -> set[str]:
    """Names a subgraph (and its own subgraphs) reads but does not define."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    reads: set[str] = set()
    for node in graph.node:
        reads |= {name for name in node.input if name and name not in defined}
        for sub in _graphs(node):
            reads |= _outer_reads(sub) - defined
        defined |= set(node.output)
    return reads | ({o.name for o in graph.output} - defined)


def _ancestry(body: onnx.FunctionProto, node: onnx.NodeProto) -> set[str]:
    """Every value `node` depends on through explicit inputs, transitively (function inputs
    included)."""
    producer = {out: n for n in body.node for out in n.output}
    seen: set[str] = set()
    stack = [name for name in node.input if name]
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in producer:
            stack += [i for i in producer[name].input if i]
    return seen


@pytest.mark.parametrize("spec", op_registry.op_specs(), ids=lambda spec: spec.name)
def test_control_flow_reads_only_what_it_depends_on(spec):
    body = spec.function_proto()
    inputs = set(body.input)
    attribute_conditions = 0
    for node in body.node:
        if node.op_type not in CONTROL_FLOW:
            continue
        ancestry = _ancestry(body, node)
        if node.op_type == "If" and not ancestry & inputs:
            attribute_conditions += 1  # a constant once the attributes are bound
            continue
        reads = set().union(*(_outer_reads(g) for g in _graphs(node)))
        missing = sorted(reads - ancestry)
        assert not missing, f"{node.op_type} {node.name} reads {missing} it does not depend on"
    assert attribute_conditions == ATTRIBUTE_CONDITIONS.get(spec.name, 0)


@pytest.mark.parametrize("runner_name", ["ort_all", "ort_none", "reference"])
@pytest.mark.parametrize("beta", [1.0, 0.7])
@pytest.mark.parametrize("negative_slope", [0.0, 0.01, 1.0, 2.5])
def test_every_evolving_activation_branch_matches_pytorch(negative_slope, beta, runner_name):
    base = CASE_BY_OP["EvolvingAttention"]
    case = dataclasses.replace(
        base, attributes={**base.attributes, "negative_slope": negative_slope, "beta": beta}
    )
    infer = make_runner(case, runner_name, np.float32)
    for layout in (LAYOUTS[0], LAYOUTS[2], LAYOUTS[3]):
        run_case(case, layout, runner_name, np.float32, infer=infer)
