"""The `attndeploy` op set (docs/ops.md, version 1): the `OpSpec`s every variant declares,
collected.

Each variant package that has ops names its `ops` module in its `VariantSpec`; that module's
`OPS` tuple lists its `OpSpec`s (`attndeploy.opspec.spec`), the causal (decoder) ones included.
Nothing here lists a variant or an op: the order is the variants' `order`, then each variant's
own order (docs/ops.md order).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterable
from typing import Any

import onnx
import torch

from attndeploy.errors import ExportError
from attndeploy.opspec.bodies import DOMAIN
from attndeploy.opspec.spec import (  # noqa: F401  (re-exported)
    DEFAULT_OPSET,
    SUPPORTED_OPSETS,
    OpSpec,
    check_opset,
)
from attndeploy.variants.registry import variant_specs


@functools.cache
def op_specs() -> tuple[OpSpec, ...]:
    """Every op of the set, in docs/ops.md order (variant by variant)."""
    specs: list[OpSpec] = []
    for variant in variant_specs():
        if variant.ops is not None:
            specs.extend(importlib.import_module(variant.ops).OPS)
    _index(tuple(specs))  # refuses duplicates
    return tuple(specs)


def _index(specs: tuple[OpSpec, ...]) -> dict[Any, OpSpec]:
    index: dict[Any, OpSpec] = {}
    for spec in specs:
        for key in (spec.name, spec.functional_name, spec.reference):
            if key in index:
                raise ExportError(f"op {key!r} is registered twice")
            index[key] = spec
    return index


@functools.cache
def _by_key() -> dict[Any, OpSpec]:
    return _index(op_specs())


def op_spec(name: str | Callable[..., Any]) -> OpSpec:
    """The op called `name` (ONNX name or functional name) or whose PyTorch reference is `name`;
    an unknown one lists the valid names."""
    try:
        return _by_key()[name]
    except (KeyError, TypeError):
        valid = ", ".join(spec.name for spec in op_specs())
        raise ExportError(f"unknown {DOMAIN} op {name!r}; valid: {valid}") from None


def torch_ops() -> dict[torch._ops.OpOverload, OpSpec]:
    """The torch custom ops of the set, each with its spec (to count them in a traced graph)."""
    return {spec.torch_op: spec for spec in op_specs()}


def custom_translation_table() -> dict[torch._ops.OpOverload, Callable[..., Any]]:
    """For `torch.onnx.export(..., custom_translation_table=...)`: torch op -> opaque node, for
    every op of the set (a decoder's causal ops as an encoder's)."""
    return {spec.torch_op: spec.translation for spec in op_specs()}


def function_protos(
    opset: int = DEFAULT_OPSET, names: Iterable[str] | None = None
) -> list[onnx.FunctionProto]:
    """The FunctionProtos to append to `model_proto.functions`, default-domain opset `opset`.

    Every op of the set, or only those in `names` (ONNX or functional names, e.g. the op types
    of a model's `attndeploy` nodes), in docs/ops.md order.
    """
    check_opset(opset)
    if names is None:
        return [spec.function_proto(opset) for spec in op_specs()]
    wanted = {op_spec(name).name for name in names}
    return [spec.function_proto(opset) for spec in op_specs() if spec.name in wanted]

