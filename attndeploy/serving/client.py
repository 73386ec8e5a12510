"""Client of a Triton server over gRPC or HTTP: `TritonRunner`, the runner interface on top of
`tritonclient`.

`TritonRunner` has the runner interface shared with the validators (the torch, onnxruntime and
reference-evaluator runners): a context manager with `infer(feed) -> outputs`, both dicts of
numpy arrays keyed by tensor name. Every call to the server carries a deadline (`timeout_s`), so a
server that is down, stuck or missing the model turns into a `ServerError` that says what to do,
never a hang.

`protocol` chooses the endpoint: `grpc` (`tritonclient.grpc`, port 8001) or `http` (KServe v2
over HTTP, `tritonclient.http`, port 8000). The HTTP client is wrapped (`HttpClient`) to offer
the calls of the gRPC client that attndeploy uses, with the same keyword arguments, JSON shapes
and callback-style `async_infer`, so the load tester drives either one; a refused connection or
a timeout raises the gRPC statuses (`STATUS_UNAVAILABLE`, `STATUS_DEADLINE`), and an HTTP error
answer the status `HTTP <code>` (INVALID_ARG is `HTTP 400`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import numpy as np

from attndeploy.errors import ServerError
from attndeploy.serving.protocol import DEFAULT_URLS, Protocol

DEFAULT_URL = DEFAULT_URLS[Protocol.GRPC]
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


class HttpClient:
    """`tritonclient.http` behind the subset of `tritonclient.grpc.InferenceServerClient` that
    attndeploy calls: same methods, keyword arguments (`as_json`, `client_timeout`), JSON
    shapes (`get_model_config` -> {"config": ...}, the index -> {"models": [...]}) and a
    callback `async_infer(model, inputs, callback, client_timeout=...)` whose callback gets
    `result=` and `error=`.

    The HTTP client is not thread-safe (gevent), so each thread, and each timeout, gets its own
    connection; `async_infer` runs requests on a pool of `workers` threads (the load tester sizes
    it to its concurrency, so no request waits for a thread). Errors are normalised as the module
    docstring says.
    """

    def __init__(self, url: str, timeout_s: float = DEFAULT_TIMEOUT_S, workers: int = 1) -> None:
        self.url, self.timeout_s, self.workers = url, timeout_s, max(1, workers)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._clients: list[Any] = []
        self._pool: ThreadPoolExecutor | None = None

    def _client(self, timeout_s: float | None) -> Any:
        import tritonclient.http as httpclient

        timeout = float(timeout_s or self.timeout_s)
        clients = self._local.__dict__.setdefault("clients", {})
        if timeout not in clients:
            client = httpclient.InferenceServerClient(
                self.url, connection_timeout=timeout, network_timeout=timeout)
            clients[timeout] = client
            with self._lock:
                self._clients.append(client)
        return clients[timeout]

    def _call(self, method: str, *args: Any, client_timeout: float | None = None,
              **kwargs: Any) -> Any:
        from tritonclient.utils import InferenceServerException

        try:
            return getattr(self._client(client_timeout), method)(*args, **kwargs)
        except InferenceServerException as exc:
            status = exc.status()
            code = f"HTTP {status}" if status and str(status).isdigit() else status
            raise InferenceServerException(msg=exc.message(), status=code) from exc
        except TimeoutError as exc:
            raise InferenceServerException(msg=f"timed out ({exc})", status=STATUS_DEADLINE
                                           ) from exc
        except OSError as exc:  # refused, reset, unreachable: nobody answers there
            raise InferenceServerException(msg=str(exc) or type(exc).__name__,
                                           status=STATUS_UNAVAILABLE) from exc

    # ---- the calls attndeploy makes (gRPC client signatures)
    def is_server_live(self, client_timeout: float | None = None) -> bool:
        return bool(self._call("is_server_live", client_timeout=client_timeout))

    def is_server_ready(self, client_timeout: float | None = None) -> bool:
        return bool(self._call("is_server_ready", client_timeout=client_timeout))

    def is_model_ready(self, model: str, version: str = "",
                       client_timeout: float | None = None) -> bool:
        return bool(self._call("is_model_ready", model, version, client_timeout=client_timeout))

    def get_model_repository_index(self, as_json: bool = True,
                                   client_timeout: float | None = None) -> dict[str, Any]:
        return {"models": list(self._call("get_model_repository_index",
                                          client_timeout=client_timeout))}

    def get_model_metadata(self, model: str, version: str = "", as_json: bool = True,
                           client_timeout: float | None = None) -> dict[str, Any]:
        return dict(self._call("get_model_metadata", model, version,
                               client_timeout=client_timeout))

    def get_model_config(self, model: str, version: str = "", as_json: bool = True,
                         client_timeout: float | None = None) -> dict[str, Any]:
        return {"config": dict(self._call("get_model_config", model, version,
                                          client_timeout=client_timeout))}

    def get_inference_statistics(self, model: str = "", version: str = "", as_json: bool = True,
                                 client_timeout: float | None = None) -> dict[str, Any]:
        return dict(self._call("get_inference_statistics", model, version,
                               client_timeout=client_timeout))

    def infer(self, model: str, inputs: list[Any], model_version: str = "",
              client_timeout: float | None = None) -> Any:
        return self._call("infer", model, inputs, model_version=model_version,
                          client_timeout=client_timeout)

    def async_infer(self, model: str, inputs: list[Any], callback: Callable[..., None],
                    model_version: str = "", client_timeout: float | None = None) -> None:
        """Run `infer` on a worker thread; `callback(result=..., error=...)` when it ends."""
        from tritonclient.utils import InferenceServerException

        def run() -> None:
            try:
                result = self.infer(model, inputs, model_version, client_timeout)
            except InferenceServerException as exc:
                callback(result=None, error=exc)
            else:
                callback(result=result, error=None)

        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="attndeploy-http")
            pool = self._pool
        pool.submit(run)

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
            clients, self._clients = self._clients, []
        if pool is not None:
            pool.shutdown(wait=True)
        for client in clients:
            client.close()


class TritonRunner:
    """Runs one model on a Triton server over gRPC or HTTP (the runner interface of the
    validators).

    Use as a context manager: entering connects and checks that the server is live and the model
    ready (else `ServerError`); `infer(feed)` sends one request and returns every output by name.
    Each call waits at most `timeout_s` seconds. `url` defaults to the protocol's loopback port;
    `workers` sizes the HTTP client's thread pool for `client.async_infer`.
    """

    def __init__(
        self,
        url: str | None = None,
        model: str = "model",
        *,
        version: str = "",
        timeout_s: float = DEFAULT_TIMEOUT_S,
        protocol: Protocol | str = Protocol.GRPC,
        workers: int = 1,
    ) -> None:
        if timeout_s <= 0:
            raise ServerError(f"timeout_s must be positive, got {timeout_s}.")
        self.protocol = as_protocol(protocol)
        url = url or default_url(self.protocol)
        self.url, self.model, self.version, self.timeout_s = url, model, version, timeout_s
        self.workers = workers
        self.name = f"triton[{model}@{url}/{self.protocol.value}]"
        self._client: Any | None = None

    # ---- lifecycle
    def activate(self) -> TritonRunner:
        """Connect and check that the server is live and the model ready."""
        if self._client is None:
            if self.protocol is Protocol.HTTP:
                self._client = HttpClient(self.url, self.timeout_s, self.workers)
            else:
                import tritonclient.grpc as grpcclient

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
        """The underlying `tritonclient.grpc.InferenceServerClient`, or the `HttpClient` with
        its calls (after `activate`)."""
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

    def make_inputs(self, feed: Mapping[str, np.ndarray]) -> list[Any]:
        """`feed` as InferInput objects of this runner's protocol."""
        return make_inputs(feed, self.protocol)

    def infer(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Send one request; return every output of the model by name."""
        result = self._call("the inference request", "infer", self.model,
                            self.make_inputs(feed), model_version=self.version)
        return result_outputs(result)


def infer_once(
    url: str | None,
    model: str,
    input_ids: np.ndarray,
    attention_mask: np.ndarray,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    protocol: Protocol | str = Protocol.GRPC,
) -> dict[str, np.ndarray]:
    """One request with the model-level interface: INT64 `[batch, seq]` ids and mask."""
    feed = {
        "input_ids": np.asarray(input_ids, dtype=np.int64),  # [batch, seq]
        "attention_mask": np.asarray(attention_mask, dtype=np.int64),  # [batch, seq]
    }
    with TritonRunner(url, model, timeout_s=timeout_s, protocol=protocol) as runner:
        return runner.infer(feed)


def infer_texts(
    url: str | None,
    model: str,
    texts: list[str] | list[bytes],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    protocol: Protocol | str = Protocol.GRPC,
) -> dict[str, np.ndarray]:
    """One request to a text model: `texts` as BYTES `[batch, 1]` (a str is sent as UTF-8)."""
    array = np.array([[t.encode("utf-8") if isinstance(t, str) else t] for t in texts],
                     dtype=object)  # [batch, 1]
    with TritonRunner(url, model, timeout_s=timeout_s, protocol=protocol) as runner:
        return runner.infer({"text": array})
