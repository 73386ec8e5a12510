"""The request guard's checks, without a server: JSON depth counted without recursion (strings,
escapes and binary tensors after the JSON header excepted), and classification refused on BYTES
outputs only, over both protocols' request forms."""

from __future__ import annotations

import json

import pytest
from tritonclient.grpc import service_pb2

from attndeploy.serving.server.guard_checks import (
    MAX_JSON_DEPTH,
    GuardRefusal,
    check_json_depth,
    check_requested_outputs,
    grpc_classification_request,
    grpc_requested_outputs,
    http_classification_request,
    http_json_part,
    http_requested_outputs,
    json_depth,
)

TYPES = {"label": "BYTES", "logits": "FP32", "gates": "BOOL"}


def nested(depth: int, inner: str = '"x"') -> bytes:
    body = '{"inputs":[{"name":"text","shape":[1,1],"datatype":"BYTES","data":'
    return (body + "[" * depth + inner + "]" * depth + "}]}").encode()


@pytest.mark.parametrize(("text", "depth"), [
    (b"", 0), (b'"just a string"', 0), (b"[1, 2, 3]", 1), (b'{"a": [[1], [2, [3]]]}', 4),
    (b'["[[[[", "{{{{"]', 1),  # brackets inside strings are text
    (b'["a\\"[[[", 1]', 1),  # an escaped quote does not end the string
    (b"[[[[", 4),  # unbalanced: its open brackets count
])
def test_json_depth_counts_syntax_brackets_only(text: bytes, depth: int) -> None:
    assert json_depth(text) == depth


def test_a_request_as_deep_as_the_one_that_ends_the_server_is_refused_quickly() -> None:
    body = nested(35_000)  # about 70 KB: what ends tritonserver 2.51
    assert json_depth(body) == 35_000 + 3  # {"inputs": [{... "data": [[[...]]]}]}
    with pytest.raises(GuardRefusal, match=r"nests 35003 levels deep; at most 64"):
        check_json_depth(body)


def test_requests_as_deep_as_real_tensors_pass() -> None:
    check_json_depth(nested(8))  # a rank-8 tensor
    check_json_depth(nested(MAX_JSON_DEPTH - 3))
    with pytest.raises(GuardRefusal):
        check_json_depth(nested(MAX_JSON_DEPTH))


def test_the_json_part_stops_where_binary_tensors_begin() -> None:
    header = json.dumps({"inputs": [{"name": "x", "parameters": {"binary_data_size": 4}}]})
    body = header.encode() + b"[[[[" * 100  # binary data may hold any bytes
    part = http_json_part(body, {"Inference-Header-Content-Length": str(len(header))})
    assert part == header.encode()
    check_json_depth(part)
    assert http_json_part(body, {}) == body
    assert http_json_part(body, {"Inference-Header-Content-Length": "junk"}) == body


def http_request(outputs: list[dict]) -> bytes:
    return json.dumps({"inputs": [], "outputs": outputs}).encode()


def test_http_classification_on_a_bytes_output_is_refused_and_on_a_number_passes() -> None:
    request = http_classification_request(http_request([
        {"name": "logits", "parameters": {"classification": 3}},
        {"name": "label", "parameters": {"classification": 3}}]))
    assert http_requested_outputs(request) == [("logits", True), ("label", True)]
    with pytest.raises(GuardRefusal, match=r"output 'label' of model 'm'.*'BYTES'"):
        check_requested_outputs("m", http_requested_outputs(request), TYPES)
    numeric = http_classification_request(http_request([
        {"name": "logits", "parameters": {"classification": 3}}, {"name": "label"}]))
    check_requested_outputs("m", http_requested_outputs(numeric), TYPES)


@pytest.mark.parametrize("body", [
    http_request([{"name": "label"}]),  # no classification asked
    b"not json at all",
    b'{"outputs": "classification"}',  # named, but not an output parameter
])
def test_http_requests_without_classification_are_not_refused(body: bytes) -> None:
    request = http_classification_request(body)
    if request is not None:
        check_requested_outputs("m", http_requested_outputs(request), TYPES)


def grpc_request(*outputs: tuple[str, int | None]) -> bytes:
    request = service_pb2.ModelInferRequest(model_name="m")
    for name, classes in outputs:
        output = request.outputs.add(name=name)
        if classes is not None:
            output.parameters["classification"].int64_param = classes
    return request.SerializeToString()


def test_grpc_classification_on_a_bytes_output_is_refused_and_on_a_number_passes() -> None:
    parse = service_pb2.ModelInferRequest.FromString
    refused = grpc_classification_request(grpc_request(("label", 3)), parse)
    with pytest.raises(GuardRefusal, match=r"output 'label'.*'BYTES'"):
        check_requested_outputs("m", grpc_requested_outputs(refused), TYPES)
    numeric = grpc_classification_request(grpc_request(("logits", 3), ("label", None)), parse)
    assert grpc_requested_outputs(numeric) == [("logits", True), ("label", False)]
    check_requested_outputs("m", grpc_requested_outputs(numeric), TYPES)


def test_a_grpc_request_without_the_parameter_is_never_parsed() -> None:
    def parse(_: bytes) -> None:
        raise AssertionError("parsed a request that cannot ask for classification")

    assert grpc_classification_request(grpc_request(("label", None)), parse) is None
    assert grpc_classification_request(b"\xff\xfe not protobuf classification",
                                       service_pb2.ModelInferRequest.FromString) is None


def test_an_output_the_model_does_not_have_is_left_to_the_server() -> None:
    check_requested_outputs("m", [("nonexistent", True)], TYPES)
