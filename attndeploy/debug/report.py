"""The result of a layer-by-layer comparison, as data: one `LayerResult` per attention node,
block and model output, what was found inside the first diverging node's function, and the
verdict. `DebugReport` is truthy when nothing diverges; it writes JSON and a PNG.

JSON (`schema` "attndeploy-debug-compare", `schema_version` 1; non-finite floats as the strings
"inf", "-inf", "nan"):

```
{"schema", "schema_version", "passed": bool, "verdict": str,
 "reference": str,                  # "torch" or the reference ONNX file
 "candidate": str,                  # the ONNX file under test
 "tolerance": {"atol", "rtol"}, "gate_flip_tolerance": float, "shapes": ["BxS" | "feedN"],
 "first_divergence": null | {"kind", "label", "index"},
 "layers": [{                       # graph order
    "kind": "node" | "block" | "output", "index": int, "label": str, "op_type": str,
    "scope": str | null, "passed": bool, "shape": str,    # the feed where it is worst
    "max_abs", "max_rel", "error", "rel_error", "input_error", "added_error",
    "gates": null | {"flips", "accepted_flips", "margin"},
    "nodes": [str],                 # the graph's nodes of this layer
    "matmuls": [str],               # its MatMul/Gemm nodes (what quantize --exclude takes)
    "values": {"<name>": {...validate's per-output statistics...}}}],
 "ranked": [{"kind", "index", "label", "added_error", "rel_error", "matmuls"}],
 "inside": null | {"layer", "op_type", "node", "function", "oracle", "verdict",
                   "inputs": {...}, "attributes": {name: {"node", "reference", "equal"}},
                   "functional": {...}, "body": [{"index", "name", "op_type", "passed",
                   "outputs": {...}}], "first_body_node": null | {...}, "notes": [str]},
 "timings": {...}, "environment": {...}, "notes": [str]}
```

`error` is the largest |a - b| among the elements that break the relative tolerance (the
smallest atol that would pass, validate's `min_atol`); `rel_error` is ||a - b|| / ||b|| over
the finite elements, the scale-free size of the difference (the largest over a layer's values);
`input_error` is the same of the values that enter the layer (an attention node's inputs, what a
block reads from before it); `added_error` = rel_error - input_error, clipped at 0, is what the
layer itself adds: errors accumulate through a model, so `ranked()` orders by it. Outputs have
no `added_error`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attndeploy.fsutil import atomic_write_text
from attndeploy.validate.compare import OutputComparison, Tolerance, json_float

SCHEMA = "attndeploy-debug-compare"
SCHEMA_VERSION = 1
KINDS = ("node", "block", "output")
NOUNS = {"node": "attention node", "block": "block", "output": "output"}


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def short(value: float | None) -> str:
    """A number in two significant digits, exponent without padding: 4.1e-2, 1e-5, 0."""
    if value is None:
        return "n/a"
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    mantissa, exponent = f"{value:.1e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}" if int(exponent) else mantissa


def _json(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json(v) for v in value]
    return json_float(value)


def _badness(c: OutputComparison) -> tuple[bool, int, float, int]:
    return not c.passed, c.failing, c.max_abs or 0.0, c.flips or 0


def worse(a: OutputComparison | None, b: OutputComparison) -> OutputComparison:
    """The worse of two comparisons of one value (failing first, then the larger error)."""
    if a is None:
        return b
    return b if _badness(b) > _badness(a) else a


def error_of(comparison: OutputComparison) -> float | None:
    """The error that breaks the tolerance: validate's `min_atol` (see the module docstring)."""
    return comparison.min_atol if comparison.min_atol is not None else comparison.max_abs


@dataclass
class LayerResult:
    """One attention node, block or model output compared with the reference. Truthy when it
    passes."""

    kind: str  # "node" | "block" | "output"
    index: int  # among its kind
    label: str  # "layer 2", "block blocks.2", "output logits"
    op_type: str  # EvolvingAttention, EncoderBlock, "" for an output
    scope: str | None  # module path (None: the graph has no scopes, or an output)
    position: int  # where it is computed in the graph (orders the layers)
    nodes: tuple[str, ...] = ()
    matmuls: tuple[str, ...] = ()  # its MatMul/Gemm nodes: what `quantize --exclude` takes
    values: dict[str, OutputComparison] = field(default_factory=dict)
    shapes: dict[str, str] = field(default_factory=dict)  # value -> the feed where it is worst
    rel_error: float | None = None
    input_error: float | None = None  # the rel_error of what entered it
    added_error: float | None = None

    @property
    def passed(self) -> bool:
        return all(self.values.values())

    def __bool__(self) -> bool:
        return self.passed

    def _floats(self, attribute: str) -> float | None:
        found = [getattr(c, attribute) for c in self.values.values()
                 if c.kind == "float" and getattr(c, attribute) is not None]
        return max(found) if found else None

    @property
    def max_abs(self) -> float | None:
        return self._floats("max_abs")

    @property
    def max_rel(self) -> float | None:
        return self._floats("max_rel")

    @property
    def error(self) -> float | None:
        found = [e for c in self.values.values() if c.kind == "float"
                 if (e := error_of(c)) is not None]
        return max(found) if found else None

    @property
    def worst(self) -> tuple[str, OutputComparison] | None:
        """The failing value with the largest error (gates first), or None when it passes."""
        failing = [(n, c) for n, c in self.values.items() if not c.passed]
        if not failing:
            return None
        return max(failing, key=lambda item: (item[1].kind == "gates", error_of(item[1]) or 0))

    @property
    def gates(self) -> dict[str, Any] | None:
        found = [c for c in self.values.values() if c.kind == "gates"]
        if not found:
            return None
        margins = [c.margin for c in found if c.margin is not None]
        return {"flips": sum(c.flips or 0 for c in found),
                "accepted_flips": sum(c.accepted_flips or 0 for c in found),
                "margin": min(margins) if margins else None}

    def to_json(self) -> dict[str, Any]:
        return _json({
            "kind": self.kind, "index": self.index, "label": self.label,
            "op_type": self.op_type, "scope": self.scope, "passed": self.passed,
            "shape": next(iter(self.shapes.values()), None), "max_abs": self.max_abs,
            "max_rel": self.max_rel, "error": self.error, "rel_error": self.rel_error,
            "input_error": self.input_error, "added_error": self.added_error,
            "gates": self.gates, "nodes": list(self.nodes), "matmuls": list(self.matmuls),
            "values": {name: c.to_json() for name, c in self.values.items()},
        })


@dataclass
class BodyStep:
    """One node of the function body: its outputs against the oracle's."""

    index: int
    name: str
    op_type: str
    outputs: dict[str, OutputComparison] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(self.outputs.values())

    def to_json(self) -> dict[str, Any]:
        return _json({"index": self.index, "name": self.name, "op_type": self.op_type,
                      "passed": self.passed,
                      "outputs": {n: c.to_json() for n, c in self.outputs.items()}})


@dataclass
class InsideResult:
    """What the first diverging `attndeploy` node's function shows at the node's own inputs."""

    layer: int
    op_type: str
    node: str
    function: str  # "attndeploy::EvolvingAttention" (+ "@overload")
    oracle: str  # what its body was compared with
    tolerance: Tolerance
    inputs: dict[str, OutputComparison] = field(default_factory=dict)
    attributes: dict[str, dict[str, Any]] = field(default_factory=dict)
    functional: dict[str, OutputComparison] = field(default_factory=dict)
    body: list[BodyStep] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def first_body_node(self) -> BodyStep | None:
        return next((step for step in self.body if not step.passed), None)

    def finding(self) -> str:
        """Why the node diverges, in words (the second half of the verdict)."""
        step = self.first_body_node
        if step is not None:
            name, worst = max(((n, c) for n, c in step.outputs.items() if not c.passed),
                              key=lambda item: error_of(item[1]) or 0)
            return (f"inside its function at node `{step.name}` ({step.op_type}), "
                    f"{_amount(worst, self.tolerance)}")
        changed = [name for name, a in self.attributes.items() if not a["equal"]]
        if changed:
            name = changed[0]
            attribute = self.attributes[name]
            return (f"its attribute `{name}` is {attribute['node']:.6g} where the reference "
                    f"has {attribute['reference']:.6g}")
        failing = [(n, c) for n, c in self.inputs.items() if not c.passed]
        if failing:
            name, worst = failing[0]
            return (f"its input `{name}` already differs ({_amount(worst, self.tolerance)}): "
                    "the divergence enters before the node")
        wrong = [(n, c) for n, c in self.functional.items() if not c.passed]
        if wrong:
            name, worst = wrong[0]
            return (f"its output `{name}` differs from variants.functional at its own inputs "
                    f"({_amount(worst, self.tolerance)})")
        largest = max((error_of(c) or 0.0 for c in self.inputs.values() if c.kind == "float"),
                      default=0.0)
        return (f"its function agrees with its reference at its own inputs, which differ "
                f"within the tolerance (largest error {short(largest)}) and the op amplifies")

    def to_json(self) -> dict[str, Any]:
        first = self.first_body_node
        return _json({
            "layer": self.layer, "op_type": self.op_type, "node": self.node,
            "function": self.function, "oracle": self.oracle, "verdict": self.finding(),
            "inputs": {n: c.to_json() for n, c in self.inputs.items()},
            "attributes": self.attributes,
            "functional": {n: c.to_json() for n, c in self.functional.items()},
            "body": [step.to_json() for step in self.body],
            "first_body_node": first.to_json() if first is not None else None,
            "notes": self.notes,
        })


def _amount(comparison: OutputComparison, tolerance: Tolerance) -> str:
    if comparison.kind == "gates":
        return f"{comparison.failing} gate flip(s) on real tokens"
    if comparison.message and comparison.max_abs is None:
        return comparison.message
    return f"error {short(error_of(comparison))} against the tolerance {short(tolerance.atol)}"


@dataclass
class DebugReport:
    """A layer-by-layer comparison (see the module docstring). Truthy when nothing diverges."""

    reference: str
    candidate: str
    tolerance: Tolerance
    gate_flip_tolerance: float
    shapes: list[str]
    layers: list[LayerResult]
    inside: InsideResult | None = None
    timings: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(self.layers)

    def __bool__(self) -> bool:
        return self.passed

    @property
    def first_divergence(self) -> LayerResult | None:
        return next((layer for layer in self.layers if not layer.passed), None)

    def of_kind(self, kind: str) -> list[LayerResult]:
        return [layer for layer in self.layers if layer.kind == kind]

    def ranked(self) -> list[LayerResult]:
        """Attention nodes and blocks, the one that adds the most error first."""
        layers = [layer for layer in self.layers if layer.kind != "output"]
        return sorted(layers, key=lambda layer: (-(layer.added_error or 0.0),
                                                 -(layer.rel_error or 0.0), layer.position))

    @property
    def verdict(self) -> str:
        """One line: where the first divergence is, or that there is none."""
        first = self.first_divergence
        if first is None:
            counts = ", ".join(_count(len(self.of_kind(kind)), NOUNS[kind]) for kind in KINDS
                               if self.of_kind(kind))
            return (f"no divergence: every layer agrees within atol {short(self.tolerance.atol)}"
                    f" and rtol {short(self.tolerance.rtol)} ({counts})")
        what = f"{first.label} ({first.op_type})" if first.op_type else first.label
        if first.kind == "node" and self.inside is not None and self.inside.layer == first.index:
            return f"first divergence: {what}, {self.inside.finding()}"
        worst = first.worst
        if worst is None:  # cannot happen for a failing layer; keeps the type checker honest
            return f"first divergence: {what}"
        name, comparison = worst
        where = f", value `{name}`" if first.kind == "block" else (
            f", output `{name}`" if first.kind == "node" else "")
        return f"first divergence: {what}{where}, {_amount(comparison, self.tolerance)}"

    def to_json(self) -> dict[str, Any]:
        first = self.first_divergence
        return _json({
            "schema": SCHEMA, "schema_version": SCHEMA_VERSION, "passed": self.passed,
            "verdict": self.verdict, "reference": self.reference, "candidate": self.candidate,
            "tolerance": self.tolerance.to_json(),
            "gate_flip_tolerance": self.gate_flip_tolerance, "shapes": self.shapes,
            "first_divergence": None if first is None else {
                "kind": first.kind, "label": first.label, "index": first.index},
            "layers": [layer.to_json() for layer in self.layers],
            "ranked": [{"kind": layer.kind, "index": layer.index, "label": layer.label,
                        "added_error": layer.added_error, "rel_error": layer.rel_error,
                        "matmuls": list(layer.matmuls)}
                       for layer in self.ranked()],
            "inside": self.inside.to_json() if self.inside is not None else None,
            "timings": self.timings, "environment": self.environment, "notes": self.notes,
        })

    def write_json(self, path: Path | str) -> Path:
        atomic_write_text(Path(path), json.dumps(self.to_json(), indent=2) + "\n")
        return Path(path)

    def write_plot(self, path: Path | str) -> Path:
        from attndeploy.debug.plot import write_error_plot

        return write_error_plot(self, Path(path))
