"""What the request guard refuses before tritonserver sees a request: the two single requests
that end the tritonserver bundled here (2.51) and every release we know of up to the one that
fixes each (docs/architecture.md, "Requests that end the server").

- **Deeply nested JSON** over HTTP. Triton parses a request's JSON recursively; some 35,000
  levels of `[` (70 KB) exhaust its stack and the process ends. A KServe v2 request nests as
  deep as its largest tensor's rank plus a few levels, so anything deeper than
  `MAX_JSON_DEPTH` is refused, counted without recursion (`json_depth`).
- **The classification extension on a BYTES output**, over gRPC
  (`InferRequestedOutput(name, class_count=k)`) and HTTP (`"parameters": {"classification":
  k}`). Triton supports it on numeric outputs only, and on a BYTES output (a text model's
  `label`, `tokens`, `attended`) the process ends instead of answering an error. Such a request
  is refused with the error Triton means to give; classification on numeric outputs passes.

Each check raises `GuardRefusal`, whose message the guard answers as INVALID_ARGUMENT (gRPC) or
HTTP 400 `{"error": ...}`, Triton's own shapes for a bad request.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from attndeploy.jsonread import MAX_JSON_DEPTH  # what attndeploy's own JSON readers accept

# A tensor of rank 8 nests 11 levels deep in a KServe v2 request: MAX_JSON_DEPTH leaves room.
CLASSIFICATION = "classification"  # the output parameter of Triton's classification extension
UNCLASSIFIABLE = frozenset({"BYTES"})  # datatypes whose classification ends the server

# A JSON string, escapes included; what remains after removing them holds brackets only as syntax.
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_OPEN = b"[{"
_NOT_A_BRACKET = bytes(range(256)).translate(None, b"[]{}")


class GuardRefusal(Exception):
    """A request the guard answers itself, with this message, instead of passing it on."""


def json_depth(body: bytes) -> int:
    """The deepest nesting of `[` and `{` in a JSON text, strings excepted, counted without
    recursion (unbalanced text counts its open brackets: `[[[` is 3 deep)."""
    brackets = _JSON_STRING.sub(b'""', body).translate(None, _NOT_A_BRACKET)
    if not brackets:
        return 0
    steps = np.frombuffer(brackets, dtype=np.uint8)
    # +1 for an opening bracket, -1 for a closing one; the running sum is the depth.
    opens = np.isin(steps, list(_OPEN))
    depth = np.cumsum(np.where(opens, np.int8(1), np.int8(-1)), dtype=np.int32)
    return int(depth.max(initial=0))


def check_json_depth(body: bytes, limit: int = MAX_JSON_DEPTH) -> None:
    """Refuse a JSON text nested deeper than `limit`."""
    if body.count(b"[") + body.count(b"{") <= limit:  # cannot be deeper: skip the scan
        return
    depth = json_depth(body)
    if depth > limit:
        raise GuardRefusal(
            f"the request's JSON nests {depth} levels deep; at most {limit} are accepted "
            "(a KServe v2 tensor nests as deep as its rank)")


def refuse_classification(model: str, output: str, datatype: str | None) -> None:
    """Refuse classification on `output` of `model` when its datatype cannot be classified."""
    if datatype in UNCLASSIFIABLE:
        raise GuardRefusal(
            f"class result not available for output '{output}' of model '{model}' due to "
            f"unsupported type '{datatype}'; classification takes numeric outputs only")


def check_requested_outputs(model: str, requested: Iterable[tuple[str, bool]],
                            datatypes: Mapping[str, str]) -> None:
    """`requested`: (output name, asks for classification) pairs of one request to `model`;
    `datatypes`: the model's outputs' datatypes by name (an unknown name is Triton's to answer)."""
    for name, classified in requested:
        if classified:
            refuse_classification(model, name, datatypes.get(name))


def http_json_part(body: bytes, headers: Mapping[str, str]) -> bytes:
    """The JSON part of a KServe v2 HTTP request: all of it, or the first
    `Inference-Header-Content-Length` bytes when tensors follow it as binary data."""
    length = headers.get("Inference-Header-Content-Length")
    if length is None:
        return body
    try:
        return body[: max(0, int(length))]
    except ValueError:
        return body  # Triton answers a malformed length itself


def http_classification_request(part: bytes) -> dict[str, Any] | None:
    """The parsed JSON of a request that may ask for classification; None for one that cannot
    (no such parameter named, or not a JSON object: Triton answers those itself). Call it after
    `check_json_depth`, which bounds what the parser recurses through."""
    if CLASSIFICATION.encode() not in part:
        return None
    try:
        request = json.loads(part)
    except (ValueError, RecursionError):
        return None
    return request if isinstance(request, dict) else None


def http_requested_outputs(request: Mapping[str, Any]) -> list[tuple[str, bool]]:
    """(name, classification asked) for each output of a parsed KServe v2 JSON request."""
    outputs = request.get("outputs")
    found: list[tuple[str, bool]] = []
    for output in outputs if isinstance(outputs, list) else []:
        if not isinstance(output, dict) or not isinstance(output.get("name"), str):
            continue  # Triton answers a malformed output itself
        parameters = output.get("parameters")
        asked = isinstance(parameters, dict) and CLASSIFICATION in parameters
        found.append((output["name"], asked))
    return found


def grpc_classification_request(data: bytes, parse: Callable[[bytes], Any]) -> Any | None:
    """The parsed ModelInferRequest when its bytes name the classification parameter (only
    then is a request parsed at all; `parse`: the message's FromString); None otherwise."""
    if CLASSIFICATION.encode() not in data:
        return None
    try:
        return parse(data)
    except Exception:  # noqa: BLE001 - protobuf's DecodeError; Triton answers it itself
        return None


def grpc_requested_outputs(request: Any) -> list[tuple[str, bool]]:
    """(name, classification asked) for each output of a ModelInferRequest."""
    return [(output.name, CLASSIFICATION in output.parameters) for output in request.outputs]
