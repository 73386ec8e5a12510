"""What goes over the wire: model metadata, the protocol and its default address, numpy arrays
in (`make_inputs`) and out (`result_outputs`) of tritonclient's request objects."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from attndeploy.errors import ServerError
from attndeploy.serving.client.protocol import DEFAULT_URLS, Protocol

DEFAULT_URL = DEFAULT_URLS[Protocol.GRPC]
DEFAULT_TIMEOUT_S = 10.0  # seconds every call to the server waits at most, by default


@dataclass(frozen=True)
class TensorSpec:
    """One input or output as the server declares it (`shape` -1 = any size)."""

    name: str
    datatype: str  # Triton names: "INT64", "FP32", "BOOL", ...
    shape: tuple[int, ...]


@dataclass(frozen=True)
class ServedModelMetadata:
    """What the server says about a model (KServe's model metadata endpoint): its versions,
    inputs and outputs. Not an exported model's own metadata, which `runtime.metadata`'s
    `ModelMetadata` parses from the ONNX file."""

    name: str
    versions: tuple[str, ...]
    platform: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    def input(self, name: str) -> TensorSpec | None:
        return next((spec for spec in self.inputs if spec.name == name), None)



def as_protocol(protocol: Protocol | str) -> Protocol:
    """`protocol` as a Protocol; ServerError naming the valid ones."""
    try:
        return Protocol(protocol)
    except ValueError:
        raise ServerError(f"unknown protocol {protocol!r}; use grpc or http") from None


def default_url(protocol: Protocol | str = Protocol.GRPC) -> str:
    """The loopback address of `attndeploy serve`'s endpoint for `protocol`."""
    return DEFAULT_URLS[as_protocol(protocol)]


def to_triton_datatype(array: np.ndarray) -> str:
    """Triton's datatype name for a numpy array ("INT64", "FP32", "BOOL", "BYTES", ...)."""
    from tritonclient.utils import np_to_triton_dtype

    name = np_to_triton_dtype(array.dtype)
    if name is None:
        raise ServerError(f"Arrays of dtype {array.dtype} cannot be sent to Triton.")
    return str(name)


def make_inputs(feed: Mapping[str, np.ndarray], protocol: Protocol | str = Protocol.GRPC
                ) -> list[Any]:
    """tritonclient `InferInput` objects of `protocol` holding `feed` (reusable across
    requests). A text is a numpy object array of `bytes` (UTF-8) or `str`: Triton's BYTES.
    HTTP sends tensors in the binary extension (no JSON number formatting)."""
    if as_protocol(protocol) is Protocol.HTTP:
        import tritonclient.http as client_module
    else:
        import tritonclient.grpc as client_module  # type: ignore[no-redef]

    inputs = []
    for name, value in feed.items():
        array = np.ascontiguousarray(value)
        infer_input = client_module.InferInput(name, list(array.shape), to_triton_datatype(array))
        if client_module.__name__.endswith("http"):
            infer_input.set_data_from_numpy(array, binary_data=True)
        else:
            infer_input.set_data_from_numpy(array)
        inputs.append(infer_input)
    return inputs


def result_outputs(result: Any) -> dict[str, np.ndarray]:
    """Every output of a tritonclient `InferResult` (gRPC or HTTP), by name."""
    response = result.get_response()
    if isinstance(response, dict):  # HTTP: the JSON header of the answer
        names = [output["name"] for output in response.get("outputs", [])]
    else:
        names = [output.name for output in response.outputs]
    return {name: result.as_numpy(name) for name in names}


# --------------------------------------------------------------------------- HTTP
