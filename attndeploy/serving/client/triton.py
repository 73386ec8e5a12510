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

Modules: `client_data` (metadata, protocol, tensors in and out), `client_errors` (statuses and
`ServerError` messages), `http_client` (`HttpClient`) and this one (`TritonRunner`, one-shot
requests). Every name is importable from `attndeploy.serving.client.triton` as before the split.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import Any

import numpy as np

from attndeploy.errors import ServerError
from attndeploy.runtime.names import ATTENTION_MASK, INPUT_IDS
from attndeploy.serving.client.data import (
    DEFAULT_TIMEOUT_S,
    DEFAULT_URL,
    ServedModelMetadata,
    TensorSpec,
    as_protocol,
    default_url,
    make_inputs,
    result_outputs,
    to_triton_datatype,
)
from attndeploy.serving.client.errors import (
    CONNECTION_STATUSES,
    STATUS_DEADLINE,
    STATUS_INVALID,
    STATUS_NOT_FOUND,
    STATUS_NOT_HTTP,
    STATUS_UNAVAILABLE,
    STATUS_UNKNOWN,
    error_message,
    error_status,
    server_error,
    with_port,
)
from attndeploy.serving.client.http import HTTP_PROBE_TIMEOUT_S, HttpClient, answers_http
from attndeploy.serving.client.protocol import Protocol, server_address

__all__ = [
    "CONNECTION_STATUSES",
    "DEFAULT_TIMEOUT_S",
    "DEFAULT_URL",
    "STATUS_DEADLINE",
    "STATUS_INVALID",
    "STATUS_NOT_FOUND",
    "STATUS_NOT_HTTP",
    "STATUS_UNAVAILABLE",
    "STATUS_UNKNOWN",
    "HttpClient",
    "ServedModelMetadata",
    "TensorSpec",
    "TritonRunner",
    "as_protocol",
    "default_url",
    "error_message",
    "error_status",
    "infer_once",
    "infer_texts",
    "make_inputs",
    "result_outputs",
    "server_error",
    "text_feed",
    "to_triton_datatype",
]


class TritonRunner:
    """Runs one model on a Triton server over gRPC or HTTP (the runner interface of the
    validators).

    Use as a context manager: entering connects and checks that the server is live and the model
    ready (else `ServerError`); `infer(feed)` sends one request and returns every output by name.
    Each call waits at most `timeout_s` seconds. `url` is host:port and defaults to the
    protocol's loopback port; a host alone gets the protocol's default port (8001 gRPC, 8000
    HTTP), and a scheme (`http://`), a path or a bad port is a ServerError
    (`protocol.server_address`). `workers` sizes the HTTP client's thread pool for
    `client.async_infer`.
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
        url = server_address(url, self.protocol) if url else default_url(self.protocol)
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
            if (self.protocol is Protocol.GRPC and error_status(exc) in CONNECTION_STATUSES
                    and answers_http(self.url, min(self.timeout_s, HTTP_PROBE_TIMEOUT_S))):
                # Triton's HTTP port hangs up on gRPC ("Socket closed"), but it answers HTTP
                raise ServerError(
                    f"The server at {self.url} does not speak gRPC (it answers HTTP); is it the "
                    f"HTTP port? use --url {with_port(self.url, Protocol.GRPC)} or --protocol "
                    "http") from exc
            raise server_error(exc, self.url, self.model, action, self.timeout_s) from exc

    def _check_ready(self) -> None:
        if not self._call("the liveness probe", "is_server_live"):
            raise ServerError(f"The Triton server at {self.url} is not live yet; retry shortly.")
        if self._call("the readiness probe", "is_model_ready", self.model, self.version):
            return
        entries = self._models()
        if entries is None:  # the index is closed to clients: the ready models, from statistics
            stats = self._call("the statistics request", "get_inference_statistics", "", "",
                               as_json=True)
            ready = sorted({str(entry.get("name")) for entry in stats.get("model_stats", [])})
            raise ServerError(
                f"The Triton server at {self.url} has no model '{self.model}' ready (models "
                f"ready there: {', '.join(ready) or 'none'}); pass one of those, serve the right "
                "repository, or read the server's log if it failed to load."
            )
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

    def _models(self) -> dict[str, dict[str, Any]] | None:
        """The repository index by model name, or None when the server does not show it to
        clients (`attndeploy serve` restricts the repository API to its own key)."""
        from tritonclient.utils import InferenceServerException

        try:
            index = self.client.get_model_repository_index(as_json=True,
                                                           client_timeout=self.timeout_s)
        except InferenceServerException as exc:
            if "restricted" in error_message(exc):  # "This API/protocol is restricted, ..."
                return None
            raise server_error(exc, self.url, self.model, "the repository index",
                               self.timeout_s) from exc
        return {entry["name"]: entry for entry in index.get("models", [])}

    # ---- queries
    def is_ready(self) -> bool:
        """Whether the server is live and the model ready (False, never an error, when down)."""
        try:
            self._check_ready()
        except ServerError:
            return False
        return True

    def metadata(self) -> ServedModelMetadata:
        """The model's inputs and outputs as the server declares them."""
        data = self._call("the metadata request", "get_model_metadata", self.model,
                          self.version, as_json=True)

        def specs(key: str) -> tuple[TensorSpec, ...]:
            return tuple(
                TensorSpec(t["name"], t["datatype"], tuple(int(d) for d in t.get("shape", [])))
                for t in data.get(key, [])
            )

        return ServedModelMetadata(
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
        INPUT_IDS: np.asarray(input_ids, dtype=np.int64),  # [batch, seq]
        ATTENTION_MASK: np.asarray(attention_mask, dtype=np.int64),  # [batch, seq]
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
    with TritonRunner(url, model, timeout_s=timeout_s, protocol=protocol) as runner:
        return runner.infer(text_feed(texts))


def text_feed(texts: list[str] | list[bytes]) -> dict[str, np.ndarray]:
    """A text model's request: `text` BYTES `[batch, 1]`, a str sent as UTF-8."""
    return {"text": np.array([[t.encode("utf-8") if isinstance(t, str) else t] for t in texts],
                             dtype=object)}  # [batch, 1]
