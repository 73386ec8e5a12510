"""Random feeds for any ONNX model, from its input signature: what `optimize` runs a model on
when no checkpoint's metadata says what the inputs mean (an `export_model` file, a plain
`torch.onnx.export`, any ONNX file).

    specs = input_specs(model)                        # one InputSpec per graph input
    feed = random_feed(specs, (8, 32), bounds)        # {name: array}, batch 8, "seq" 32

Each dim is fixed (its `dim_value`) or takes a role: a dynamic dim at axis 0 of some input is the
batch, every other dynamic dim the sequence, so a (batch, seq) grid shape fixes them all; a dim
named in the model's `attndeploy.dim_bounds` metadata (what `export_model` records, e.g. BERT's
positions: seq <= 512) is clipped into its bounds. Values:
- integers: uniform in [0, high), `high` the row count of the initializer the input indexes
  (a `Gather` of an embedding table, directly or through one `Cast`: token ids get the
  vocabulary, token types 2); an input named like a mask is all ones; any other integer input
  is zeros (an index valid into anything);
- bool: True for a mask, else random;
- floats: standard normal.
Strings and other types are refused (ExportError naming the input).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from attndeploy.errors import ExportError
from attndeploy.runtime.names import META_DIM_BOUNDS

BATCH_ROLE, SEQ_ROLE = "batch", "seq"
Dim = int | str  # a fixed size, or the name of a dynamic dim


@dataclass(frozen=True)
class InputSpec:
    """One graph input: name, numpy dtype, dims (fixed ints or dynamic dim names) and, for an
    integer input that indexes a table, the exclusive upper bound of its values."""

    name: str
    dtype: np.dtype
    dims: tuple[Dim, ...]
    high: int | None = None

    @property
    def is_mask(self) -> bool:
        return "mask" in self.name.lower()


def _dims(value: onnx.ValueInfoProto) -> tuple[Dim, ...]:
    """Fixed sizes as ints; dynamic dims by name (an unnamed one by input and axis)."""
    dims: list[Dim] = []
    for axis, dim in enumerate(value.type.tensor_type.shape.dim):
        if dim.HasField("dim_value"):
            dims.append(int(dim.dim_value))
        else:
            dims.append(dim.dim_param or f"{value.name}:{axis}")
    return tuple(dims)


def _table_rows(model: onnx.ModelProto, name: str) -> int | None:
    """Rows of the initializer that a `Gather` indexes with `name` (or a `Cast` of it)."""
    tables = {t.name: t for t in model.graph.initializer}
    names = {name} | {n.output[0] for n in model.graph.node
                      if n.op_type == "Cast" and n.input and n.input[0] == name}
    rows = [tables[n.input[0]].dims[0] for n in model.graph.node
            if n.op_type == "Gather" and len(n.input) == 2 and n.input[1] in names
            and n.input[0] in tables and tables[n.input[0]].dims]
    return int(min(rows)) if rows else None


def input_specs(model: onnx.ModelProto) -> list[InputSpec]:
    """The graph's inputs (initializers listed as inputs left out); ExportError for a type
    no random feed can be made of."""
    initializers = {t.name for t in model.graph.initializer}
    specs = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        if not value.type.HasField("tensor_type"):
            raise ExportError(f"input {value.name} is not a tensor; optimize makes random "
                              f"tensors of numbers and bools only")
        elem = value.type.tensor_type.elem_type
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem)) if elem else None
        if dtype is None or dtype.kind not in "biuf":
            kind = onnx.TensorProto.DataType.Name(elem) if elem else "untyped"
            raise ExportError(f"input {value.name} is a {kind.lower()} tensor; optimize makes "
                              f"random tensors of numbers and bools only")
        high = _table_rows(model, value.name) if dtype.kind in "iu" else None
        specs.append(InputSpec(value.name, dtype, _dims(value), high))
    return specs


def dim_bounds(metadata: Mapping[str, str]) -> dict[str, tuple[int, int | None]]:
    """{dim name: (low, high or None)} from `attndeploy.dim_bounds`; {} without it (or with a
    value that is not such a mapping: the bounds are a help, not a contract)."""
    try:
        raw = json.loads(metadata.get(META_DIM_BOUNDS, "{}"))
        return {str(k): (int(v[0]), None if v[1] is None else int(v[1])) for k, v in raw.items()}
    except (ValueError, TypeError, AttributeError, IndexError, KeyError):
        return {}


def dim_roles(specs: Iterable[InputSpec]) -> dict[str, str]:
    """{dynamic dim name: "batch" or "seq"}: batch where it is some input's axis 0."""
    specs = list(specs)
    first = {s.dims[0] for s in specs if s.dims and isinstance(s.dims[0], str)}
    return {d: BATCH_ROLE if d in first else SEQ_ROLE
            for s in specs for d in s.dims if isinstance(d, str)}


def dim_sizes(specs: Sequence[InputSpec], shape: tuple[int, int],
              bounds: Mapping[str, tuple[int, int | None]]) -> dict[str, int]:
    """Each dynamic dim's size at grid shape (batch, seq), clipped into its bounds."""
    batch, seq = shape
    sizes = {}
    for name, role in dim_roles(specs).items():
        size = batch if role == BATCH_ROLE else seq
        low, high = bounds.get(name, (1, None))
        sizes[name] = max(low, 1, size if high is None else min(size, high))
    return sizes


def grid_shape(specs: Sequence[InputSpec], shape: tuple[int, int],
               bounds: Mapping[str, tuple[int, int | None]]) -> tuple[int, int]:
    """The (batch, seq) the model actually gets for `shape` once dims are clipped."""
    roles, sizes = dim_roles(specs), dim_sizes(specs, shape, bounds)
    batch = [sizes[d] for d, r in roles.items() if r == BATCH_ROLE]
    seq = [sizes[d] for d, r in roles.items() if r == SEQ_ROLE]
    return (batch[0] if batch else shape[0], seq[0] if seq else shape[1])


def random_feed(specs: Sequence[InputSpec], shape: tuple[int, int],
                bounds: Mapping[str, tuple[int, int | None]], seed: int = 0
                ) -> dict[str, np.ndarray]:
    """One feed at grid shape (batch, seq) (module docstring)."""
    sizes = dim_sizes(specs, shape, bounds)
    rng = np.random.default_rng([seed, *shape])
    feed = {}
    for spec in specs:
        dims = tuple(d if isinstance(d, int) else sizes[d] for d in spec.dims)
        if spec.dtype.kind == "b":
            value = np.ones(dims, bool) if spec.is_mask else rng.random(dims) < 0.5
        elif spec.dtype.kind in "iu":
            if spec.is_mask:
                value = np.ones(dims, spec.dtype)
            else:
                value = rng.integers(0, spec.high or 1, size=dims).astype(spec.dtype)
        else:
            value = rng.standard_normal(dims).astype(spec.dtype)
        feed[spec.name] = value
    return feed
