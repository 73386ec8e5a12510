"""Inside one `attndeploy` node: why it diverges, found at the node's own inputs.

Given the node's inputs and outputs in the run under test and the reference's (the PyTorch op
call, or the same node of a reference ONNX model), four checks:

1. inputs: the node's inputs against the reference's (a difference here entered upstream);
2. attributes: the node's attributes against the reference's (the PyTorch call's, resolved as
   the exporter resolves them: `scale=None` is 1/sqrt(d));
3. functional: the node's outputs against `variants.functional` run on the node's own inputs
   and attributes (float inputs upcast to float32: the reference is the maths);
4. body: the node's function inlined into a one-node model, every node of the body exposed,
   run in onnxruntime with no graph optimizations (the runtime under test, unfused so that each
   intermediate exists), against the op set's own body for this op (`OpSpec.function_proto`,
   the contract's body, which the op tests hold to `variants.functional`) inlined the same way
   and run in `onnx.reference.ReferenceEvaluator` (an independent implementation), both on the
   node's own inputs and attributes. The first body node whose output differs is named. Nodes
   are matched by the names the inliner gives their outputs (the same for the same body), or by
   position when the body was rewritten with other names. An edited body shows at the node that
   was edited; a runtime that computes an op differently shows at that op.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import onnx.inliner

from attndeploy.debug.graph import CustomNode, GraphLayers
from attndeploy.debug.report import BodyStep, InsideResult
from attndeploy.errors import AttnDeployError
from attndeploy.validate.compare import OutputComparison, Tolerance, compare_arrays, compare_gates

ORACLE = ("the op set's body for this op (attndeploy.opspec) in onnx.reference.ReferenceEvaluator"
          "; the node's own body in onnxruntime with no graph optimizations")


@dataclass(frozen=True)
class ReferenceCall:
    """What the reference computed for one node: inputs, attributes, outputs."""

    inputs: Sequence[np.ndarray]
    attributes: Mapping[str, float]
    outputs: Sequence[np.ndarray]


def compare_value(name: str, actual: np.ndarray, expected: np.ndarray, tolerance: Tolerance,
                  *, gate_logits: np.ndarray | None = None, flip_tolerance: float,
                  valid: np.ndarray | None = None, per_token: bool = False,
                  agreement: Callable[[np.ndarray, np.ndarray], np.ndarray | None] | None = None,
                  agreement_name: str = "") -> OutputComparison:
    """validate's comparison of one value: bool exactly (gates, with flips near the threshold
    accepted), anything else under the tolerance rule; a `per_token` float value ([B, T, ...],
    a model family's per-token output) on the real tokens `valid` only, with the family's
    decision `agreement` reported where given."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.dtype == np.bool_ or expected.dtype == np.bool_:
        shape_ok = valid is not None and valid.shape == expected.shape
        logits = gate_logits if gate_logits is not None and \
            np.shape(gate_logits) == expected.shape else None
        return compare_gates(name, actual, expected, logits,
                             valid=valid if shape_ok else None, flip_tolerance=flip_tolerance)
    real = valid if per_token and valid is not None and \
        np.shape(valid) == expected.shape[:2] else None
    return compare_arrays(name, actual, expected, tolerance, valid=real, agreement=agreement,
                          agreement_name=agreement_name)


def node_attributes(node: onnx.NodeProto) -> dict[str, float]:
    """The float attributes of a node (the op set's attributes are all floats)."""
    return {a.name: float(a.f) for a in node.attribute if a.type == onnx.AttributeProto.FLOAT}


def _same_float(a: float, b: float) -> bool:
    """Equal as ONNX stores them (float32), or within float32 rounding."""
    return bool(np.float32(a) == np.float32(b)) or abs(a - b) <= 1e-6 * max(abs(a), abs(b))


# ----------------------------------------------------------------------------- the body


def _value_info(name: str, value: np.ndarray) -> onnx.ValueInfoProto:
    element = onnx.helper.np_dtype_to_tensor_dtype(value.dtype)
    return onnx.helper.make_tensor_value_info(name, element, None)


def body_model(node: onnx.NodeProto, function: onnx.FunctionProto, opset: int,
               inputs: Sequence[np.ndarray], ir_version: int) -> onnx.ModelProto:
    """A model of the one call `node(function)` on the function's formal inputs, inlined, with
    every node of the body an output (in body order)."""
    call = onnx.NodeProto()
    call.CopyFrom(node)
    del call.input[:], call.output[:], call.metadata_props[:]
    call.input.extend(function.input[: len(inputs)])
    call.output.extend(function.output)
    call.overload = function.overload
    graph = onnx.helper.make_graph(
        [call], "body",
        [_value_info(name, value) for name, value in zip(function.input, inputs, strict=False)],
        [onnx.helper.make_empty_tensor_value_info(name) for name in function.output],
    )
    imports = {o.domain: o.version for o in function.opset_import}
    imports[""] = opset
    imports[function.domain] = 1
    model = onnx.helper.make_model(
        graph, functions=[function],
        opset_imports=[onnx.helper.make_opsetid(d, v) for d, v in imports.items()],
    )
    model.ir_version = ir_version
    inlined = onnx.inliner.inline_local_functions(model)
    present = set(function.output)
    for inner in inlined.graph.node:
        for name in inner.output:
            if name and name not in present:
                inlined.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
                present.add(name)
    return inlined


def _run_ort(model: onnx.ModelProto, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    from attndeploy.validate.runners import OrtRunner

    with OrtRunner(model.SerializeToString(), "none", threads=1) as runner:
        return runner.infer(dict(feed))


def _run_reference(model: onnx.ModelProto,
                   feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    import onnx.reference

    evaluator = onnx.reference.ReferenceEvaluator(model)
    names = list(evaluator.output_names)
    values = evaluator.run(None, dict(feed))
    return {name: np.asarray(v) for name, v in zip(names, values, strict=True)}


def _body_steps(candidate: onnx.ModelProto, pristine: onnx.ModelProto,
                got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray],
                compare: Any) -> list[BodyStep]:
    """Each candidate body node's outputs against the pristine body's (module docstring)."""
    theirs = list(pristine.graph.node)
    by_name = any(out in want for node in candidate.graph.node for out in node.output)
    steps = []
    for index, node in enumerate(candidate.graph.node):
        step = BodyStep(index, node.name or f"{node.op_type}_{index}", node.op_type)
        if by_name:
            pairs = [(out, out) for out in node.output if out in got and out in want]
        elif index < len(theirs):
            pairs = [(out, other) for out, other in zip(node.output, theirs[index].output,
                                                        strict=False)
                     if out in got and other in want]
        else:
            pairs = []
        for out, other in pairs:
            step.outputs[out] = compare(out, got[out], want[other])
        steps.append(step)
    return steps


def _original_names(function: onnx.FunctionProto, steps: list[BodyStep]) -> None:
    """Name each step after the function's own node (the inliner renames them)."""
    if len(function.node) == len(steps):
        for step, node in zip(steps, function.node, strict=True):
            step.name = node.name or f"{node.op_type}_{step.index}"


# ----------------------------------------------------------------------------- entry point


def look_inside(graph: GraphLayers, custom: CustomNode, inputs: Sequence[np.ndarray],
                outputs: Sequence[np.ndarray], reference: ReferenceCall, tolerance: Tolerance,
                flip_tolerance: float) -> InsideResult:
    """The four checks of the module docstring for one node of `graph`."""
    from attndeploy.variants.op_registry import op_spec

    node = custom.node
    function = graph.function_of(node)
    overload = f"@{node.overload}" if node.overload else ""
    result = InsideResult(custom.index, node.op_type, custom.name,
                          f"{node.domain}::{node.op_type}{overload}", ORACLE, tolerance)
    try:
        spec = op_spec(node.op_type)
    except AttnDeployError:
        spec = None
        result.notes.append(f"{node.op_type} is not an op of the attndeploy set: no PyTorch "
                            "reference and no contract body to compare with")
    if function is not None:
        names, out_names = list(function.input), list(function.output)
    else:
        result.notes.append(f"the model has no function for {result.function}")
        names = list(spec.input_names) if spec is not None else [
            f"input_{i}" for i in range(len(inputs))]
        out_names = [f"output_{i}" for i in range(len(outputs))]
    gate_logits, mask = _gate_inputs(names, inputs)

    def compare(name: str, got: np.ndarray, want: np.ndarray) -> OutputComparison:
        return compare_value(name, got, want, tolerance, gate_logits=gate_logits,
                             flip_tolerance=flip_tolerance, valid=mask)

    for name, got, want in zip(names, inputs, reference.inputs, strict=False):
        result.inputs[name] = compare(name, got, want)
    own = node_attributes(node)
    result.attributes = _attributes(own, reference.attributes)
    if spec is None:
        return result
    expected = _functional(spec, inputs, own)
    for name, got, want in zip(out_names, outputs, expected, strict=False):
        result.functional[name] = compare(name, got, want)
    if function is not None:
        _look_at_body(result, graph, node, function, spec.function_proto(graph.opset), inputs,
                      compare)
    return result


def _attributes(own: Mapping[str, float], theirs: Mapping[str, float]) -> dict[str, dict]:
    found = {}
    for name in sorted(set(own) | set(theirs)):
        mine, other = own.get(name), theirs.get(name)
        equal = mine is not None and other is not None and _same_float(mine, other)
        found[name] = {"node": mine, "reference": other, "equal": equal}
    return found


def _look_at_body(result: InsideResult, graph: GraphLayers, node: onnx.NodeProto,
                  function: onnx.FunctionProto, pristine_function: onnx.FunctionProto,
                  inputs: Sequence[np.ndarray], compare: Any) -> None:
    """Check 4 of the module docstring, into `result.body` (or a note why it could not run)."""
    feed = dict(zip(function.input, inputs, strict=False))
    opset, ir_version = graph.opset, graph.model.ir_version
    try:
        mine = body_model(node, function, opset, inputs, ir_version)
        pristine = body_model(node, pristine_function, opset, inputs, ir_version)
        got = _run_ort(mine, feed)
        try:
            want = _run_reference(pristine, feed)
        except Exception as exc:  # the evaluator raises many types; fall back, and say so
            result.notes.append(f"onnx.reference could not run the op set's body "
                                f"({type(exc).__name__}: {exc}); onnxruntime ran it instead")
            result.oracle = ORACLE.replace("onnx.reference.ReferenceEvaluator",
                                           "onnxruntime with no graph optimizations")
            want = _run_ort(pristine, feed)
    except AttnDeployError as exc:
        result.notes.append(f"the body could not be run on its own: {exc}")
        return
    except Exception as exc:  # onnx's inliner and checker raise many types; keep the message
        result.notes.append(f"the body could not be run on its own: {type(exc).__name__}: "
                            f"{exc}")
        return
    result.body = _body_steps(mine, pristine, got, want, compare)
    _original_names(function, result.body)
    if len(function.node) != len(pristine_function.node):
        result.notes.append(f"the node's body has {len(function.node)} nodes, the op set's "
                            f"{len(pristine_function.node)}: it was rewritten")


def _gate_inputs(names: Sequence[str], inputs: Sequence[np.ndarray]
                 ) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(gate_logits, key_padding_mask) among a node's inputs, where it has them."""
    by_name = dict(zip(names, inputs, strict=False))
    logits = by_name.get("gate_logits")
    mask = by_name.get("key_padding_mask")
    return (None if logits is None else np.asarray(logits, np.float64),
            None if mask is None else np.asarray(mask, bool))


def _functional(spec: Any, inputs: Sequence[np.ndarray],
                attributes: Mapping[str, float]) -> list[np.ndarray]:
    """`variants.functional` on the node's own inputs and attributes (floats as float32)."""
    import torch

    tensors = []
    for value in inputs:
        array = np.ascontiguousarray(value)
        if array.dtype.kind == "f":
            array = array.astype(np.float32)
        tensors.append(torch.from_numpy(array))
    with torch.inference_mode():
        result = spec.reference(*tensors, **{k: attributes[k] for k in spec.attributes
                                             if k in attributes})
    outputs = result if isinstance(result, tuple) else (result,)
    return [o.detach().cpu().numpy() for o in outputs]
