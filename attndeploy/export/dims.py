"""Dynamic dims for torch.export: names become `Dim`s, and the bounds the model needs are found.

`export_model(..., dynamic_shapes={"input_ids": {0: "batch", 1: "seq"}, ...})` names each dynamic
axis; one name is one dim everywhere, and a `torch.export.Dim` may stand in for a name. A name
starts unbounded (`Dim(name, min=1)`). Many models cannot take every size: a Hugging Face BERT adds
position embeddings from a 512-row table, so torch.export refuses an unbounded `seq` with a
constraint violation whose "Suggested fixes" say `seq = Dim('seq', max=512)`. A model with a
Hugging Face-style config gets the bound from it first (`models.inputs.position_limit`: RoBERTa
looks its positions up by value, which torch.export cannot bound at all). `export_program`
applies such fixes itself (`torch.export.dynamic_shapes.refine_dynamic_shapes_from_suggested_fixes`)
and exports again, as long as a fix only lowers a dim's upper bound (a table the model indexes);
the narrowed bounds are reported (`Refined.bounds`). A fix that pins a dim to one size, ties it to
another dim or raises its lower bound (the model traces another graph for shorter inputs) would
make the graph take fewer shapes than asked for, or the wrong graph for some: that is an
ExportError of one line, naming the dim and the bound torch.export found.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from attndeploy.errors import ExportError
from attndeploy.runtime.names import ATTENTION_MASK, INPUT_IDS

MAX_REFINEMENTS = 4  # exports retried with narrowed dims; each fix narrows at least one dim
# A raised lower bound up to this is torch.export's own 0/1 specialisation, not the model's; a
# higher one means the graph is another below it, so it is refused rather than taken.
MIN_SIZE_ACCEPTED = 2
_FIX_LINE = re.compile(r"^\s*(?P<name>\w+)\s*=\s*(?P<fix>.+?)\s*(#.*)?$")


# Inputs whose axis 1 is the sequence in the Hugging Face convention (and this project's).
SEQUENCE_INPUTS = (INPUT_IDS, ATTENTION_MASK, "token_type_ids", "position_ids",
                   "inputs_embeds")


@dataclass(frozen=True)
class DimSpec:
    """torch.export's per-argument dims and {input: {axis: dim name}} for the ONNX graph."""

    per_argument: tuple[dict[int, Any] | None, ...]
    names: dict[str, dict[int, str]]
    bounds: dict[str, tuple[int, int | None]] = field(default_factory=dict)  # set by seq_limit


@dataclass
class Refined:
    """What torch.export's suggested fixes changed: {dim name: (min, max)} of narrowed dims."""

    bounds: dict[str, tuple[int, int | None]] = field(default_factory=dict)


def dim_spec(
    inputs: Mapping[str, torch.Tensor], dynamic_shapes: Mapping[str, Mapping[int, Any]] | None,
    *, seq_limit: int | None = None,
) -> DimSpec:
    """One `Dim` per name (shared by every axis that names it); `Dim` objects pass as given.

    `seq_limit` (a model's position table, `position_limit`) bounds a NAMED dim on axis 1 of a
    `SEQUENCE_INPUTS` input: RoBERTa indexes its table by values torch.export cannot bound."""
    sequence_names = {str(axes[1]) for name, axes in (dynamic_shapes or {}).items()
                      if name in SEQUENCE_INPUTS and isinstance(axes.get(1), str)}
    dynamic_shapes = dynamic_shapes or {}
    unknown = sorted(set(dynamic_shapes) - set(inputs))
    if unknown:
        raise ExportError(f"dynamic_shapes names unknown input(s) {unknown}; inputs: "
                          f"{sorted(inputs)}")
    dims: dict[str, Any] = {}
    spec: list[dict[int, Any] | None] = []
    names: dict[str, dict[int, str]] = {}
    for input_name, tensor in inputs.items():
        axes = dynamic_shapes.get(input_name)
        if not axes:
            spec.append(None)
            continue
        per_axis: dict[int, Any] = {}
        for axis, dim in axes.items():
            axis = int(axis)
            if not 0 <= axis < tensor.dim():
                raise ExportError(f"{input_name} has {tensor.dim()} dims; axis {axis} is not one")
            if int(tensor.shape[axis]) < 2:
                raise ExportError(
                    f"{input_name}: the example has size {int(tensor.shape[axis])} on dynamic "
                    f"axis {axis}; torch.export specialises sizes 0 and 1, use an example >= 2"
                )
            if isinstance(dim, str):
                bound = seq_limit if dim in sequence_names else None
                dim = dims.setdefault(dim, torch.export.Dim(dim, min=1, max=bound))
            elif not hasattr(dim, "__name__"):
                raise ExportError(f"{input_name} axis {axis}: a dynamic dim is a name or a "
                                  f"torch.export.Dim, not {type(dim).__name__}")
            per_axis[axis] = dim
            names.setdefault(input_name, {})[axis] = dim.__name__
        spec.append(per_axis)
    bounds = {name: (1, seq_limit) for name in sequence_names if name in dims}
    return DimSpec(tuple(spec), names, bounds if seq_limit is not None else {})


def _suggested_fixes(message: str) -> dict[str, str]:
    """{dim name: its fix} from a constraint violation's "Suggested fixes:" block."""
    _, _, block = message.partition("Suggested fixes:")
    fixes = {}
    for line in block.splitlines():
        match = _FIX_LINE.match(line)
        if match:
            fixes[match["name"]] = match["fix"]
        elif fixes and line.strip():
            break  # the block ended
    return fixes


def _bounds(dim: Any) -> tuple[int, int | None]:
    """(min, max) of a Dim; min at least 1 (torch.export's fixes say 0 when they leave it out,
    and the names asked for sizes >= 1), max None when unbounded."""
    high = getattr(dim, "max", None)
    return max(1, int(getattr(dim, "min", 1) or 1)), None if high is None or high > 2**62 \
        else int(high)


def _narrowed(old: tuple, new: tuple, refined: Refined) -> None:
    """Record the dims the fixes narrowed; ExportError for a dim they pinned or tied."""
    for old_axes, new_axes in zip(old, new, strict=True):
        for axis, dim in (old_axes or {}).items():
            fixed = new_axes[axis] if new_axes is not None else None
            name = dim.__name__
            if isinstance(fixed, int) or fixed is None:
                raise ExportError(
                    f"dynamic dim '{name}' cannot stay dynamic: torch.export specialises it to "
                    f"{fixed} for this model (give that axis no name, or change the model)")
            if getattr(fixed, "__name__", name) != name or type(fixed).__name__ == "_DerivedDim":
                raise ExportError(
                    f"dynamic dim '{name}' cannot stay independent: torch.export ties it to "
                    f"'{fixed.__name__}' for this model; name both axes alike")
            low, high = _bounds(fixed)
            if low > max(_bounds(dim)[0], MIN_SIZE_ACCEPTED):
                raise ExportError(
                    f"dynamic dim '{name}' would only take sizes >= {low}: the model traces a "
                    f"different graph below that (torch.export suggests Dim('{name}', min={low})); "
                    "change the model or give that axis no name")
            if (low, high) != _bounds(dim):
                refined.bounds[name] = (low, high)


def export_program(module: torch.nn.Module, example: tuple, spec: DimSpec
                   ) -> tuple[Any, Refined]:
    """`torch.export.export(module, example)` (non-strict) with the dims of `spec`, narrowed as
    torch.export suggests when a dim's range is all that stands in the way (module docstring)."""
    from torch._dynamo.exc import UserError
    from torch.export.dynamic_shapes import refine_dynamic_shapes_from_suggested_fixes

    dims = (spec.per_argument,)  # the flat module takes its tensors as one *args parameter
    refined = Refined(dict(spec.bounds))
    for attempt in range(MAX_REFINEMENTS + 1):
        try:
            return torch.export.export(module, example, dynamic_shapes=dims, strict=False), refined
        except UserError as exc:
            message = str(exc)
            fixes = _suggested_fixes(message)
            if not fixes or attempt == MAX_REFINEMENTS:
                raise ExportError(f"torch.export failed: {_first_lines(message)}") from exc
            block = "Suggested fixes:\n" + "\n".join(f"  {name} = {fix}"
                                                    for name, fix in fixes.items())
            try:
                new = refine_dynamic_shapes_from_suggested_fixes(block, dims)
            except Exception as refine_error:  # the fixes could not be applied: say which
                fix = "; ".join(f"{name} = {value}" for name, value in fixes.items())
                raise ExportError(f"torch.export needs the dims changed ({fix}) and could not "
                                  f"apply that itself: give those bounds as torch.export.Dim "
                                  "objects") from refine_error
            _narrowed(dims[0], tuple(new[0]), refined)
            dims = (tuple(new[0]),)
        except Exception as exc:  # torch.export raises many types; keep its message
            raise ExportError(f"torch.export failed: {_first_lines(str(exc))}") from exc
    raise AssertionError("unreachable: the loop returns or raises")


def _first_lines(text: str, limit: int = 25) -> str:
    lines = text.strip().splitlines()
    return "\n".join(lines[:limit] + (["..."] if len(lines) > limit else []))
