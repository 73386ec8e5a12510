"""`OpSpec`: one op of the `attndeploy` op set (docs/ops.md, version 1), and what export derives.

An op is declared once, beside its variant (`attndeploy/variants/<name>/op_*.py`): the torch
custom op (`torch.ops.attndeploy.<name>`), its fake, and its onnxscript body; the variant's
`ops.py` lists them as `OpSpec`s. From that declaration this module derives
- the opaque ONNX node the exporter emits (`translation`): an `onnxscript` `Op` built from an
  `onnx.defs.OpSchema` that is never registered globally, so the exporter cannot inline it
  (torch.onnx inlines every model-local function it records: onnxscript#2813, pytorch#154319);
- the FunctionProto appended to the exported model afterwards (`function_proto(opset)`), whose
  body uses standard ONNX ops only and whose default-domain opset equals the model's;
- the call that replaces the PyTorch reference while torch.export traces (`export_call`).

It reads nothing but that declaration and docs/ops.md's rules: the reference arrives in the
`OpSpec`, and the one convention `export_call` adds, `scale` 1/sqrt(d) when not given, is the
contract's (docs/ops.md), stated here for the exporter as `functional.resolve_scale` states it
for PyTorch (tests/export/test_ops.py holds the two equal). So this module imports no variant:
`attndeploy.variants.functional` would run `attndeploy/variants/__init__.py` and with it the
variant registry, a layer above this one.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import Any

import onnx
import onnx.inliner
import onnxscript
import torch
from onnxscript import ir

from attndeploy.errors import ExportError
from attndeploy.opspec.bodies import (
    ATTNDEPLOY,
    BODY_OPSET,
    DOMAIN,
    DOMAIN_VERSION,
    HELPERS,
    INTERNAL,
)

# The bodies are written against opset 18: the oldest they support (ReduceMax takes its axes as an
# input from 18 on) and torch.onnx's native opset (no version conversion). From 18 to 23 the ops
# they use change only by added element types, so `function_proto` re-stamps the body's
# default-domain import to the model's opset; tests/export/test_ops.py runs every supported one
# (onnx.checker rejects a body whose import differs from the model's; onnxruntime does not).
DEFAULT_OPSET = BODY_OPSET
SUPPORTED_OPSETS = range(18, 24)


@dataclasses.dataclass(frozen=True)
class OpSpec:
    """One op of the contract: ONNX name, PyTorch reference, torch custom op and ONNX body.

    Declared in the `OPS` of its variant's `ops` module (`attndeploy/variants/<name>/ops.py`).
    """

    name: str  # ONNX op type in domain `attndeploy`, as in docs/ops.md
    reference: Callable[..., Any]  # the PyTorch reference (e.g. `functional.qvi_attention`)
    torch_op: torch._ops.OpOverload  # torch.ops.attndeploy.<reference name>.default
    function: onnxscript.OnnxFunction  # the body; may call the helpers of `opspec.bodies`
    torch_only: tuple[str, ...] = ()  # reference keywords that only steer PyTorch evaluation

    @property
    def functional_name(self) -> str:
        """The reference's name, also the torch custom op's (`torch.ops.attndeploy.<name>`)."""
        return self.reference.__name__

    def __post_init__(self) -> None:
        if self.function.name != self.name or self.function.opset != ATTNDEPLOY:
            raise ExportError(
                f"op {self.name!r}: its body is {self.function.opset.domain}::"
                f"{self.function.name}, expected {DOMAIN}::{self.name}"
            )

    # ----------------------------------------------------------------- declaration, derived

    @property
    def attributes(self) -> tuple[str, ...]:
        """Attribute names, in the order of the body's signature (all float)."""
        return tuple(
            p.name for p in self.function.op_signature.params
            if isinstance(p, ir.schemas.AttributeParameter)
        )

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(
            p.name for p in self.function.op_signature.params
            if not isinstance(p, ir.schemas.AttributeParameter)
        )

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(self._inlined_body.output)

    @functools.cached_property
    def schema(self) -> onnx.defs.OpSchema:
        """The node's OpSchema, derived from the body's annotated signature (not registered)."""
        return _schema_from_function(self.function, self.output_names)

    @functools.cached_property
    def onnx_op(self) -> onnxscript.values.Op:
        """The opaque node: calling it while the exporter traces records one `attndeploy` node."""
        return onnxscript.values.Op(ATTNDEPLOY, self.name, self.schema)

    @functools.cached_property
    def translation(self) -> Callable[..., Any]:
        """The `custom_translation_table` entry: torch op arguments in, the opaque node out."""
        onnx_op = self.onnx_op

        # The exporter calls this with the FX node's args (tensors, in schema order) and kwargs
        # (the float attributes); the OpSchema binds them. Its signature is not used to dispatch.
        def translate(*inputs: Any, **attributes: float) -> Any:
            return onnx_op(*inputs, **attributes)

        translate.__name__ = translate.__qualname__ = f"translate_{self.functional_name}"
        translate.__doc__ = f"Emit one opaque {DOMAIN}::{self.name} node."
        return translate

    # ----------------------------------------------------------------- export-time stand-in

    def export_call(self, *tensors: torch.Tensor, **attrs: Any) -> Any:
        """Called like the reference; runs the torch custom op (one ONNX node when exported).

        `scale=None` becomes 1/sqrt(d) (the exporter always writes the attribute); missing
        attributes take the functional's defaults; `torch_only` keywords are dropped.
        """
        for name in self.torch_only:
            attrs.pop(name, None)
        unknown = sorted(set(attrs) - set(self.attributes))
        if unknown:
            raise TypeError(f"{self.functional_name}() got unexpected keyword(s) {unknown}")
        defaults = self._attribute_defaults
        values = {name: attrs.get(name, defaults.get(name)) for name in self.attributes}
        if "scale" in values and values["scale"] is None:
            values["scale"] = default_scale(tensors[0])
        missing = [name for name, value in values.items() if value is None]
        if missing:
            raise TypeError(f"{self.functional_name}() missing attribute(s) {missing}")
        return self.torch_op(*tensors, **{name: float(v) for name, v in values.items()})

    @functools.cached_property
    def _attribute_defaults(self) -> dict[str, Any]:
        reference = inspect.signature(self.reference)
        return {
            name: p.default for name, p in reference.parameters.items()
            if p.default is not inspect.Parameter.empty
        }

    # ----------------------------------------------------------------- function body

    @functools.cached_property
    def _inlined_body(self) -> onnx.FunctionProto:
        """The body with the `attndeploy.internal` helpers inlined, default opset BODY_OPSET."""
        helpers = [h.to_function_proto() for h in HELPERS]
        holder = onnx.helper.make_model(
            onnx.helper.make_graph([], "holder", [], []),
            functions=[self.function.to_function_proto(), *helpers],
            opset_imports=[
                onnx.helper.make_opsetid("", BODY_OPSET),
                onnx.helper.make_opsetid(DOMAIN, DOMAIN_VERSION),
                onnx.helper.make_opsetid(INTERNAL.domain, INTERNAL.version),
            ],
        )
        inlined = onnx.inliner.inline_selected_functions(
            holder, [(h.domain, h.name) for h in helpers]
        )
        (body,) = [f for f in inlined.functions if (f.domain, f.name) == (DOMAIN, self.name)]
        foreign = {n.domain for n in body.node} - {""}
        if foreign:
            raise ExportError(f"body of {self.name} still calls domains {sorted(foreign)}")
        kept = [o for o in body.opset_import if o.domain == ""]
        del body.opset_import[:]
        body.opset_import.extend(kept)
        body.doc_string = inspect.getdoc(self.function.function) or ""
        return body

    def function_proto(self, opset: int = DEFAULT_OPSET) -> onnx.FunctionProto:
        """The model-local FunctionProto of this op for a model of default-domain `opset`."""
        check_opset(opset)
        proto = onnx.FunctionProto()
        proto.CopyFrom(self._inlined_body)
        for entry in proto.opset_import:
            if entry.domain == "":
                entry.version = opset
        return proto


def default_scale(query: torch.Tensor) -> float:
    """The `scale` the exporter writes when none is given: 1/sqrt(d), d the query's last axis
    (docs/ops.md)."""
    return query.shape[-1] ** -0.5


def check_opset(opset: int) -> None:
    if opset not in SUPPORTED_OPSETS:
        raise ExportError(
            f"opset {opset} is not supported by the {DOMAIN} op bodies; choose one of "
            f"{SUPPORTED_OPSETS.start}..{SUPPORTED_OPSETS.stop - 1} (default {DEFAULT_OPSET})"
        )


def _type_string(type_: ir.TypeProtocol) -> str:
    return f"tensor({onnx.TensorProto.DataType.Name(type_.dtype.value).lower()})"


def _schema_from_function(
    function: onnxscript.OnnxFunction, output_names: tuple[str, ...]
) -> onnx.defs.OpSchema:
    """OpSchema from the body's annotations: `TFloat` becomes the constraint `T` of docs/ops.md,
    a single-type annotation (BOOL) a concrete type; every attribute is required."""
    signature = function.op_signature
    constraints: dict[str, list[str]] = {}

    def type_str(param: ir.schemas.Parameter) -> str:
        allowed = sorted(_type_string(t) for t in param.type_constraint.allowed_types)
        if len(allowed) == 1:
            return allowed[0]
        constraints["T"] = allowed
        return "T"

    inputs, attributes = [], []
    for param in signature.params:
        if isinstance(param, ir.schemas.AttributeParameter):
            attr_type = onnx.defs.OpSchema.AttrType.__members__[param.type.name]
            attributes.append(onnx.defs.OpSchema.Attribute(param.name, attr_type, required=True))
        else:
            inputs.append(onnx.defs.OpSchema.FormalParameter(param.name, type_str(param)))
    outputs = [
        onnx.defs.OpSchema.FormalParameter(name, type_str(param))
        for name, param in zip(output_names, signature.outputs, strict=True)
    ]
    return onnx.defs.OpSchema(
        function.name,
        DOMAIN,
        DOMAIN_VERSION,
        inspect.getdoc(function.function) or "",
        inputs=inputs,
        outputs=outputs,
        type_constraints=[(name, types, "float type") for name, types in constraints.items()],
        attributes=attributes,
        node_determinism=onnx.defs.OpSchema.NodeDeterminism.Deterministic,
    )
