"""The PyTorch side of a layer-by-layer comparison: every `attndeploy` op call and every block's
output of one forward pass, as numpy arrays.

Op calls: the layers run their maths through `variants.api.call_op(<op reference>, ...)`,
which in eager mode calls the reference it is handed: looked up at call time on its variant's
`reference` module (re-exported by `attndeploy.variants.functional`), or a name a layer's module
imported from there (`from ...reference import sieve_attention`, as a plug-in variant may).
`recording_op_calls` puts a recorder in front of each op of the set wherever a loaded module
holds it under any name, for the duration of a `with` block (and restores the originals however
it ends): the k-th recorded call is what the k-th `attndeploy`
node of the export computes. Only outermost calls are recorded (an op that calls another from
inside is one call). The recorder is process-wide while it is in place: run nothing else in
PyTorch at the same time.

Blocks: `recording_modules` adds forward hooks to named modules and keeps the tensors each call
takes (positional and keyword arguments) and returns (a tuple, list, dict or dataclass flattened
in order; None dropped).
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from attndeploy.variants import functional
from attndeploy.variants.op_registry import OpSpec, op_specs


@dataclass
class OpCall:
    """One call of an op of the set: its spec, tensor arguments, attributes and outputs."""

    spec: OpSpec
    inputs: list[np.ndarray]  # in the op's input order
    attributes: dict[str, Any]  # as passed (torch-only keywords included)
    outputs: list[np.ndarray]  # in the op's output order

    def resolved_attributes(self) -> dict[str, float]:
        """The attributes the exporter writes for this call (`OpSpec.export_call`'s rule):
        defaults filled in, `scale=None` as 1/sqrt(d), torch-only keywords dropped."""
        defaults = _attribute_defaults(self.spec.reference)
        values = {name: self.attributes.get(name, defaults.get(name))
                  for name in self.spec.attributes}
        if "scale" in values:
            query = torch.from_numpy(np.ascontiguousarray(self.inputs[0]))
            values["scale"] = functional.resolve_scale(query, values["scale"])
        return {name: float(value) for name, value in values.items() if value is not None}


@dataclass
class Recording:
    """What one forward pass recorded."""

    calls: list[OpCall] = field(default_factory=list)
    inputs: dict[str, list[list[np.ndarray]]] = field(default_factory=dict)  # module -> calls
    outputs: dict[str, list[list[np.ndarray]]] = field(default_factory=dict)  # module -> calls


@functools.cache
def _attribute_defaults(reference: Callable[..., Any]) -> dict[str, Any]:
    import inspect

    return {name: p.default for name, p in inspect.signature(reference).parameters.items()
            if p.default is not inspect.Parameter.empty}


def to_numpy(value: Any) -> np.ndarray:
    return value.detach().cpu().numpy()


def flatten_tensors(value: Any) -> list[torch.Tensor]:
    """Every tensor of a module's output, in order (containers and dataclasses flattened)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, Mapping):
        return [t for item in value.values() for t in flatten_tensors(item)]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in flatten_tensors(item)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [t for f in dataclasses.fields(value)
                for t in flatten_tensors(getattr(value, f.name))]
    if callable(getattr(value, "to_tuple", None)):  # a Hugging Face ModelOutput
        return flatten_tensors(value.to_tuple())
    return []


@contextmanager
def recording_op_calls(recording: Recording) -> Iterator[None]:
    """Record every outermost op call into `recording.calls` (see the module docstring)."""
    depth = [0]

    def recorder(spec: OpSpec, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def record(*args: Any, **attrs: Any) -> Any:
            depth[0] += 1
            try:
                result = original(*args, **attrs)
            finally:
                depth[0] -= 1
            if depth[0] == 0:
                outputs = result if isinstance(result, tuple) else (result,)
                recording.calls.append(OpCall(
                    spec, [to_numpy(a) for a in args if isinstance(a, torch.Tensor)],
                    dict(attrs), [to_numpy(o) for o in outputs],
                ))
            return result

        return record

    places = _op_places(op_specs())
    try:
        for module, name, spec in places:
            setattr(module, name, recorder(spec, spec.reference))
        yield
    finally:
        for module, name, spec in places:
            setattr(module, name, spec.reference)


def _op_places(specs: Sequence[OpSpec]) -> list[tuple[Any, str, OpSpec]]:
    """(module, name, spec) for every name under which a loaded module holds an op's reference:
    its variant's own `reference` module, the `functional` facade that re-exports it, and any
    layer module that imported the function itself (a layer then calls its own binding, which
    replacing the reference module's would miss)."""
    by_id = {id(spec.reference): spec for spec in specs}
    homes = {sys.modules[spec.reference.__module__] for spec in specs} | {functional}
    places = []
    for module in [*homes, *(m for m in list(sys.modules.values()) if m not in homes)]:
        names = getattr(module, "__dict__", None)
        if not isinstance(names, dict):
            continue
        for name, value in list(names.items()):
            spec = by_id.get(id(value))
            if spec is not None and value is spec.reference:
                places.append((module, name, spec))
    return places


@contextmanager
def recording_modules(model: torch.nn.Module, names: Sequence[str],
                      recording: Recording) -> Iterator[None]:
    """Keep the input and output tensors of the modules `names` (paths in `model`) at every
    call."""
    modules = dict(model.named_modules())
    handles = []

    def before(name: str) -> Callable[..., None]:
        def keep(module: torch.nn.Module, args: Any, kwargs: Any) -> None:
            tensors = [to_numpy(t) for t in flatten_tensors([args, kwargs])]
            recording.inputs.setdefault(name, []).append(tensors)

        return keep

    def after(name: str) -> Callable[..., None]:
        def keep(module: torch.nn.Module, args: Any, output: Any) -> None:
            tensors = [to_numpy(t) for t in flatten_tensors(output)]
            recording.outputs.setdefault(name, []).append(tensors)

        return keep

    try:
        for name in names:
            if name in modules:
                handles.append(modules[name].register_forward_pre_hook(before(name),
                                                                       with_kwargs=True))
                handles.append(modules[name].register_forward_hook(after(name)))
        yield
    finally:
        for handle in handles:
            handle.remove()
