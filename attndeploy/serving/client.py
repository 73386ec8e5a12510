"""gRPC client of a Triton server: `TritonRunner`, the runner interface on top of `tritonclient`.

`TritonRunner` has the runner interface shared with the validators (the torch, onnxruntime and
reference-evaluator runners): a context manager with `infer(feed) -> outputs`, both dicts of
numpy arrays keyed by tensor name. Every call to the server carries a deadline (`timeout_s`), so a
server that is down, stuck or missing the model turns into a `ServerError` that says what to do,
never a hang.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import numpy as np

from attndeploy.errors import ServerError

DEFAULT_URL = "127.0.0.1:8001"
DEFAULT_TIMEOUT_S = 10.0

# gRPC status codes as tritonclient writes them in `InferenceServerException.status()`.
STATUS_UNAVAILABLE = "StatusCode.UNAVAILABLE"
STATUS_DEADLINE = "StatusCode.DEADLINE_EXCEEDED"
STATUS_NOT_FOUND = "StatusCode.NOT_FOUND"
STATUS_INVALID = "StatusCode.INVALID_ARGUMENT"
STATUS_UNKNOWN = "StatusCode.UNKNOWN"
CONNECTION_STATUSES = frozenset({STATUS_UNAVAILABLE})


@dataclass(frozen=True)
class TensorSpec:
    """One input or output as the server declares it (`shape` -1 = any size)."""

    name: str
    datatype: str  # Triton names: "INT64", "FP32", "BOOL", ...
    shape: tuple[int, ...]


@dataclass(frozen=True)
class ModelMetadata:
    """What the server says about a model: its versions, inputs and outputs."""

    name: str
    versions: tuple[str, ...]
    platform: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    def input(self, name: str) -> TensorSpec | None:
        return next((spec for spec in self.inputs if spec.name == name), None)


def error_status(error: BaseException) -> str:
    """The gRPC status of a tritonclient error ("StatusCode.X"), or the exception's class name."""
    status = getattr(error, "status", None)
    code = status() if callable(status) else None
    return str(code) if code else type(error).__name__


def error_message(error: BaseException) -> str:
    message = getattr(error, "message", None)
    text = message() if callable(message) else None
    return str(text) if text else str(error)


def server_error(error: BaseException, url: str, model: str, action: str,
                 timeout_s: float) -> ServerError:
    """Turn a tritonclient error raised while doing `action` into a ServerError that says why."""
    status, message = error_status(error), error_message(error)
    if status in CONNECTION_STATUSES:
        return ServerError(
            f"No Triton server answers at {url} ({message}); start one with `attndeploy serve` "
            "or pass the right --url."
        )
    if status == STATUS_DEADLINE:
        return ServerError(
            f"The Triton server at {url} did not answer {action} within {timeout_s:g} s; "
            "it may be overloaded or stuck (raise the timeout or check its log)."
        )
    if status == STATUS_NOT_FOUND or "unknown model" in message.lower():
        return ServerError(
            f"The Triton server at {url} has no model '{model}' ({message}); "
            "check the name with `attndeploy info` or the repository you serve."
        )
    return ServerError(
        f"{action[:1].upper()}{action[1:]} on model '{model}' at {url} failed [{status}]: {message}"
    )


def to_triton_datatype(array: np.ndarray) -> str:
    """Triton's datatype name for a numpy array ("INT64", "FP32", "BOOL", "BYTES", ...)."""
    from tritonclient.utils import np_to_triton_dtype

    name = np_to_triton_dtype(array.dtype)
    if name is None:
        raise ServerError(f"Arrays of dtype {array.dtype} cannot be sent to Triton.")
    return str(name)


def make_inputs(feed: Mapping[str, np.ndarray]) -> list[Any]:
    """`tritonclient.grpc.InferInput` objects holding `feed` (reusable across requests)."""
    import tritonclient.grpc as grpcclient

    inputs = []
    for name, value in feed.items():
        array = np.ascontiguousarray(value)
        infer_input = grpcclient.InferInput(name, list(array.shape), to_triton_datatype(array))
        infer_input.set_data_from_numpy(array)
        inputs.append(infer_input)
    return inputs


def result_outputs(result: Any) -> dict[str, np.ndarray]:
    """Every output of a tritonclient `InferResult`, by name."""
    names = [output.name for output in result.get_response().outputs]
    return {name: result.as_numpy(name) for name in names}


class TritonRunner:
    """Runs one model on a Triton server over gRPC (the runner interface of the validators).

    Use as a context manager: entering connects and checks that the server is live and the model
    ready (else `ServerError`); `infer(feed)` sends one request and returns every output by name.
    Each call waits at most `timeout_s` seconds.
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        model: str = "model",
        *,
        version: str = "",
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        if timeout_s <= 0:
            raise ServerError(f"timeout_s must be positive, got {timeout_s}.")
        self.url, self.model, self.version, self.timeout_s = url, model, version, timeout_s
        self.name = f"triton[{model}@{url}]"
        self._client: Any | None = None

    # ---- lifecycle
    def activate(self) -> TritonRunner:
        """Connect and check that the server is live and the model ready."""
        import tritonclient.grpc as grpcclient

        if self._client is None:
            self._client = grpcclient.InferenceServerClient(self.url)
        try:
            self._check_ready()
        except BaseException:
            self.deactivate()
            raise
        return self

    def deactivate(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> TritonRunner:
        return self.activate()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.deactivate()

    @property
    def client(self) -> Any:
        """The underlying `tritonclient.grpc.InferenceServerClient` (after `activate`)."""
        if self._client is None:
            raise ServerError("The runner is not active; use it in a `with` block.")
        return self._client

    def _call(self, action: str, method: str, *args: Any, **kwargs: Any) -> Any:
        from tritonclient.utils import InferenceServerException

        try:
            return getattr(self.client, method)(*args, client_timeout=self.timeout_s, **kwargs)
        except InferenceServerException as exc:
            raise server_error(exc, self.url, self.model, action, self.timeout_s) from exc

    def _check_ready(self) -> None:
        if not self._call("the liveness probe", "is_server_live"):
            raise ServerError(f"The Triton server at {self.url} is not live yet; retry shortly.")
        if self._call("the readiness probe", "is_model_ready", self.model, self.version):
            return
        index = self._call("the repository index", "get_model_repository_index", as_json=True)
        entries = {entry["name"]: entry for entry in index.get("models", [])}
        if self.model not in entries:
            known = ", ".join(sorted(entries)) or "none"
            raise ServerError(
                f"The Triton server at {self.url} has no model '{self.model}' "
                f"(models there: {known}); pass one of those or serve the right repository."
            )
        entry = entries[self.model]
        raise ServerError(
            f"Model '{self.model}' on {self.url} is not ready "
            f"(state {entry.get('state', 'unknown')}: {entry.get('reason', 'no reason given')})."
        )

    # ---- queries
    def is_ready(self) -> bool:
        """Whether the server is live and the model ready (False, never an error, when down)."""
        try:
            self._check_ready()
        except ServerError:
            return False
        return True

    def metadata(self) -> ModelMetadata:
        """The model's inputs and outputs as the server declares them."""
        data = self._call("the metadata request", "get_model_metadata", self.model,
                          self.version, as_json=True)

        def specs(key: str) -> tuple[TensorSpec, ...]:
            return tuple(
                TensorSpec(t["name"], t["datatype"], tuple(int(d) for d in t.get("shape", [])))
                for t in data.get(key, [])
            )

        return ModelMetadata(
            name=data.get("name", self.model),
            versions=tuple(data.get("versions", [])),
            platform=data.get("platform", ""),
            inputs=specs("inputs"),
            outputs=specs("outputs"),
        )

    def model_config(self) -> dict[str, Any]:
        """The model's configuration as the server loaded it (JSON form of config.pbtxt)."""
        data = self._call("the configuration request", "get_model_config", self.model,
                          self.version, as_json=True)
        return dict(data.get("config", {}))

    def statistics(self) -> dict[str, Any]:
        """The raw statistics JSON of the model (all counts are strings, see `loadstats`)."""
        return dict(
            self._call("the statistics request", "get_inference_statistics", self.model,
                       self.version, as_json=True)
        )

    def infer(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Send one request; return every output of the model by name."""
        result = self._call("the inference request", "infer", self.model, make_inputs(feed),
                            model_version=self.version)
        return result_outputs(result)


def infer_once(
    url: str,
    model: str,
    input_ids: np.ndarray,
    attention_mask: np.ndarray,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> dict[str, np.ndarray]:
    """One request with the model-level interface: INT64 `[batch, seq]` ids and mask."""
    feed = {
        "input_ids": np.asarray(input_ids, dtype=np.int64),  # [batch, seq]
        "attention_mask": np.asarray(attention_mask, dtype=np.int64),  # [batch, seq]
    }
    with TritonRunner(url, model, timeout_s=timeout_s) as runner:
        return runner.infer(feed)
