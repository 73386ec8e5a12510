"""Stored tensors onnxruntime would refuse to load, found without loading them: `tensor_problems`.

A tensor stored in a model (an initializer of the graph or of a subgraph, the parts of a sparse
initializer, a tensor attribute such as a Constant node's `value`, in the graph and in the
model-local functions) must declare dims that are not negative and hold exactly the data they
declare: embedded, its `raw_data` (or typed data field) has that size, which also fits in the
file; external, its `location` is a regular file inside the model file's folder, whose length
covers `offset` plus the declared bytes (and its `length`, when given, is those bytes).
onnxruntime checks the same when it loads the model, so a truncated or tampered file (dims of
2^31 x 2^20 over no data) is refused by `package` and `check-repo`, not first by `serve`.
Only sizes are read: external data stays on disk, and embedded bytes are only measured.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from pathlib import Path

import onnx
from onnx import TensorProto

from attndeploy.echo import echo
from attndeploy.errors import RepositoryError

# bits per element as onnxruntime lays them out in raw_data (4-bit types: two per byte); a type
# not listed (a newer or a sub-byte one) has its dims checked, not its data
_BITS = {
    getattr(TensorProto, name): bits
    for name, bits in (
        ("FLOAT", 32), ("UINT8", 8), ("INT8", 8), ("UINT16", 16), ("INT16", 16), ("INT32", 32),
        ("INT64", 64), ("BOOL", 8), ("FLOAT16", 16), ("DOUBLE", 64), ("UINT32", 32),
        ("UINT64", 64), ("COMPLEX64", 64), ("COMPLEX128", 128), ("BFLOAT16", 16),
        ("FLOAT8E4M3FN", 8), ("FLOAT8E4M3FNUZ", 8), ("FLOAT8E5M2", 8), ("FLOAT8E5M2FNUZ", 8),
        ("FLOAT8E8M0", 8), ("UINT4", 4), ("INT4", 4), ("FLOAT4E2M1", 4),
    )
    if hasattr(TensorProto, name)
}
_COMPLEX = {TensorProto.COMPLEX64, TensorProto.COMPLEX128}  # two typed entries per element
_TYPED_FIELDS = ("float_data", "int32_data", "string_data", "int64_data", "double_data",
                 "uint64_data")
_A = onnx.AttributeProto
_HOLDING = {_A.TENSOR, _A.TENSORS, _A.SPARSE_TENSOR, _A.SPARSE_TENSORS, _A.GRAPH, _A.GRAPHS}


def _graph_tensors(graph: onnx.GraphProto, where: str) -> Iterator[tuple[str, TensorProto]]:
    for tensor in graph.initializer:
        yield f"initializer of {where}", tensor
    for sparse in graph.sparse_initializer:
        yield f"sparse initializer values of {where}", sparse.values
        yield f"sparse initializer indices of {where}", sparse.indices
    yield from _node_tensors(graph.node, where)


def _node_tensors(nodes: Iterable[onnx.NodeProto], where: str
                  ) -> Iterator[tuple[str, TensorProto]]:
    for node in nodes:
        for attr in node.attribute:
            if attr.type not in _HOLDING:
                continue
            shown = echo(repr(node.output[0] if node.output else node.name))
            owner = f"{echo(node.op_type)} node {shown} in {where}"
            place = f"attribute {echo(attr.name)} of {owner}"
            if attr.HasField("t"):
                yield place, attr.t
            for tensor in attr.tensors:
                yield place, tensor
            for sparse in (*([attr.sparse_tensor] if attr.HasField("sparse_tensor") else []),
                           *attr.sparse_tensors):
                yield place, sparse.values
                yield place, sparse.indices
            for graph in (*([attr.g] if attr.HasField("g") else []), *attr.graphs):
                yield from _graph_tensors(graph, f"a subgraph of {owner}")


def stored_tensors(model: onnx.ModelProto) -> Iterator[tuple[str, TensorProto]]:
    """(where it is, tensor) for every tensor stored in `model`: graph, subgraphs, functions."""
    yield from _graph_tensors(model.graph, "the graph")
    for function in model.functions:
        name = echo(f"{function.domain}::{function.name}")
        yield from _node_tensors(function.node, f"function {name}")


def _type_name(data_type: int) -> str:
    try:
        return TensorProto.DataType.Name(data_type)
    except ValueError:
        return f"type {data_type}"


def _declared(tensor: TensorProto) -> tuple[int, int | None]:
    """(elements, bytes) the dims declare; bytes None for a type without a fixed size."""
    count = math.prod(tensor.dims)
    bits = _BITS.get(tensor.data_type)
    return count, None if bits is None else math.ceil(count * bits / 8)


def _embedded_problem(tensor: TensorProto, file_size: int) -> str | None:
    """What is wrong with an embedded tensor's data, said after its dims; None when nothing."""
    count, size = _declared(tensor)
    if size is not None and size > file_size:
        return f" ({size} bytes), more than the whole file holds ({file_size} bytes)"
    if tensor.HasField("raw_data"):
        held = len(tensor.raw_data)
        return None if size is None or held == size else f" ({size} bytes) but holds {held} bytes"
    if tensor.data_type == TensorProto.STRING:
        want = count
    elif size is None:
        return None
    elif tensor.data_type in _COMPLEX:
        want = 2 * count
    else:  # one entry per element, sub-byte types packed into bytes
        want = math.ceil(count * min(_BITS[tensor.data_type], 8) / 8)
    held = sum(len(getattr(tensor, name)) for name in _TYPED_FIELDS)
    return None if held == want else f" ({want} values) but holds {held} values"


def _external_problem(tensor: TensorProto, model_path: Path) -> str | None:
    """What is wrong with an external tensor's data, said after its dims; None when nothing."""
    info = {entry.key: entry.value for entry in tensor.external_data}
    location = info.get("location", "")
    shown = echo(repr(location))
    if not location:
        return ", with its data in an external file, but names none"
    folder = model_path.parent.resolve()
    try:
        target = (folder / location).resolve()
        inside = not Path(location).is_absolute() and target.is_relative_to(folder)
        file_size = target.stat().st_size if inside and target.is_file() else None
    except (OSError, ValueError):  # a name too long to exist, a NUL byte
        inside, file_size = True, None
    if not inside:
        return (f", with its data in {shown}, outside the folder of {model_path.name} "
                "(onnxruntime reads external data only from the model's own folder)")
    if file_size is None:
        return f", with its data in {shown}, which is not a file beside {model_path.name}"
    numbers: dict[str, int] = {}
    for key in ("offset", "length"):
        raw = info.get(key)
        if raw is not None:
            if not raw.isdigit():
                return (f", with its data at an external {key} of {echo(repr(raw))}, not a "
                        "byte count")
            numbers[key] = int(raw)
    _, size = _declared(tensor)
    if size is None:
        return None
    if "length" in numbers and numbers["length"] != size:
        return f" ({size} bytes) but its external length is {numbers['length']} bytes"
    offset = numbers.get("offset", 0)
    if offset + size > file_size:
        return f" ({size} bytes from offset {offset}) but {shown} holds {file_size} bytes"
    return None


def tensor_problems(model: onnx.ModelProto, path: Path) -> list[str]:
    """One line per stored tensor of `model` (read from `path`) that onnxruntime would refuse:
    negative dims, or declared bytes that its data, the file or its external file do not hold."""
    path = Path(path)
    file_size = path.stat().st_size
    problems: list[str] = []
    for where, tensor in stored_tensors(model):
        dims = list(tensor.dims)
        if any(dim < 0 for dim in dims):
            problem: str | None = ", but a dim cannot be negative"
        elif tensor.data_location == TensorProto.EXTERNAL:
            problem = _external_problem(tensor, path)
        else:
            problem = _embedded_problem(tensor, file_size)
        if problem is not None:
            label = f"tensor {echo(repr(tensor.name))}" if tensor.name else "unnamed tensor"
            problems.append(
                f"{path}: {label} ({where}) declares dims {echo(str(dims))} of "
                f"{_type_name(tensor.data_type)}{problem}; onnxruntime would refuse to load it: "
                "re-export the model"
            )
    return problems


def check_tensors(model: onnx.ModelProto, path: Path) -> None:
    """RepositoryError naming the first of `tensor_problems` (and how many more there are)."""
    problems = tensor_problems(model, path)
    if problems:
        more = f" ({len(problems) - 1} more tensor(s) like it)" if len(problems) > 1 else ""
        raise RepositoryError(problems[0] + more)
