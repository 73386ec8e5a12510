"""`attndeploy inspect MODEL.onnx`: what an ONNX file holds, as data (no torch import).

`inspect_model(path)` returns a JSON-ready dict: opsets, custom-domain nodes and whether each op
type ships a function body, the inputs and outputs with their dims and dtypes, attndeploy's
metadata (the model config parsed), the file size, and whether attndeploy made the file.
`format_inspection(info)` renders it for a terminal.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import onnx
from google.protobuf.message import DecodeError

from attndeploy.errors import ExportError
from attndeploy.interface import DEFAULT_DOMAINS
from attndeploy.jsonread import parse_json
from attndeploy.runtime.names import META_PREFIX, PRODUCER

# Metadata every attndeploy export writes (docs/ops.md, "Model-level interface").
REQUIRED_METADATA = ("variant", "version", "config", "weights_sha256", "opset")


def _load(path: Path) -> onnx.ModelProto:
    if not path.is_file():
        raise ExportError(f"{path} does not exist or is not a file")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise ExportError(f"{path} is not an ONNX model (it does not parse: {exc})") from exc
    # Protobuf parses many byte strings into a ModelProto without complaint: a real model has an
    # IR version, a default-domain opset and a graph.
    if model.ir_version <= 0 or not model.HasField("graph") or not model.opset_import:
        raise ExportError(
            f"{path} is not an ONNX model (no IR version, opset import or graph in the file)"
        )
    return model


def _dtype_name(elem_type: int) -> str:
    """ONNX element type -> numpy-style name: float32, float16, int64, bool, bfloat16, ..."""
    try:
        return onnx.helper.tensor_dtype_to_np_dtype(elem_type).name
    except (KeyError, TypeError, ValueError):
        return onnx.TensorProto.DataType.Name(elem_type).lower()


def _value(value: onnx.ValueInfoProto) -> dict[str, Any]:
    """name, dtype and dims (a string for a symbolic dim, an int for a fixed one, None if
    unknown; dims None when the rank itself is unknown)."""
    tensor = value.type.tensor_type
    dims: list[str | int | None] | None = None
    if tensor.HasField("shape"):
        dims = [
            d.dim_param if d.HasField("dim_param") else d.dim_value
            if d.HasField("dim_value") else None
            for d in tensor.shape.dim
        ]
    kind = value.type.WhichOneof("value")
    dtype = _dtype_name(tensor.elem_type) if kind == "tensor_type" else kind
    return {"name": value.name, "dtype": dtype, "dims": dims}


def _custom_ops(model: onnx.ModelProto) -> list[dict[str, Any]]:
    counts = Counter(
        (n.domain, n.op_type) for n in model.graph.node if n.domain not in DEFAULT_DOMAINS
    )
    functions = {(f.domain, f.name) for f in model.functions}
    return [
        {"domain": domain, "op_type": op_type, "count": count,
         "has_function": (domain, op_type) in functions}
        for (domain, op_type), count in sorted(counts.items())
    ]


def inspect_model(path: Path | str) -> dict[str, Any]:
    """What the ONNX file at `path` holds (JSON-ready); ExportError if it is not ONNX."""
    path = Path(path)
    model = _load(path)
    opsets = {o.domain or "ai.onnx": o.version for o in model.opset_import}
    metadata = {
        p.key[len(META_PREFIX):]: p.value
        for p in model.metadata_props if p.key.startswith(META_PREFIX)
    }
    config: dict[str, Any] | None = None
    if metadata.get("config"):
        try:
            config = parse_json(metadata["config"], "config", error=ExportError)
        except ExportError:  # not JSON, or nested too deep: shown as having none
            config = None
    custom_ops = _custom_ops(model)
    initializers = list(model.graph.initializer)
    return {
        "path": str(path),
        "file_size": path.stat().st_size,
        "made_by_attndeploy": model.producer_name == PRODUCER
        and all(metadata.get(key) for key in REQUIRED_METADATA),
        "producer": {"name": model.producer_name, "version": model.producer_version},
        "ir_version": model.ir_version,
        "opset": opsets.get("ai.onnx"),
        "opsets": opsets,
        "custom_domains": sorted(d for d in opsets if d != "ai.onnx"),
        "nodes": len(model.graph.node),
        "op_types": dict(sorted(Counter(
            n.op_type if n.domain in DEFAULT_DOMAINS else f"{n.domain}::{n.op_type}"
            for n in model.graph.node
        ).items())),
        "custom_ops": custom_ops,
        "custom_nodes": {f"{c['domain']}::{c['op_type']}": c["count"] for c in custom_ops},
        "all_custom_ops_have_functions": all(c["has_function"] for c in custom_ops),
        "functions": [
            {"domain": f.domain, "name": f.name, "nodes": len(f.node)} for f in model.functions
        ],
        "inputs": [_value(v) for v in model.graph.input],
        "outputs": [_value(v) for v in model.graph.output],
        "initializers": len(initializers),
        "parameters": sum(_numel(t) for t in initializers),
        "external_data": any(
            t.data_location == onnx.TensorProto.EXTERNAL for t in initializers
        ),
        "metadata": metadata,
        "config": config,
        "other_metadata": {
            p.key: p.value for p in model.metadata_props if not p.key.startswith(META_PREFIX)
        },
    }


def _numel(tensor: onnx.TensorProto) -> int:
    count = 1
    for dim in tensor.dims:
        count *= dim
    return count


def _dims_text(dims: list[Any] | None) -> str:
    if dims is None:
        return "[?]"
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def format_inspection(info: dict[str, Any]) -> str:
    """A terminal rendering of `inspect_model`'s result (plain text)."""
    size = info["file_size"]
    lines = [
        f"{info['path']}  ({size / 1024:.1f} KiB, {info['parameters']:,} parameters)",
        f"made by attndeploy: {'yes' if info['made_by_attndeploy'] else 'no'}"
        f"  (producer {info['producer']['name'] or '?'} {info['producer']['version']})",
        "opsets: " + ", ".join(f"{d} {v}" for d, v in info["opsets"].items()),
        f"nodes: {info['nodes']}",
    ]
    if info["custom_ops"]:
        lines.append("custom nodes:")
        for c in info["custom_ops"]:
            body = "function" if c["has_function"] else "NO FUNCTION (onnxruntime will refuse it)"
            lines.append(f"  {c['count']} x {c['domain']}::{c['op_type']}  [{body}]")
    else:
        lines.append("custom nodes: none")
    for title in ("inputs", "outputs"):
        lines.append(f"{title}:")
        for value in info[title]:
            lines.append(f"  {value['name']}: {value['dtype']} {_dims_text(value['dims'])}")
    meta = info["metadata"]
    if meta:
        lines.append("attndeploy metadata:")
        for key in ("variant", "family", "head", "version", "opset", "dtype", "max_seq",
                    "inlined", "weights_sha256"):
            if key in meta:
                lines.append(f"  {key}: {meta[key]}")
        if info["config"] is not None:
            lines.append(f"  config: {json.dumps(info['config'], sort_keys=True)}")
    return "\n".join(lines)
