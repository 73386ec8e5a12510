"""`HttpClient`: tritonclient.http behind the calls of the gRPC client that attndeploy uses."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http.client import HTTPConnection, HTTPException
from typing import Any

from attndeploy.serving.client.data import DEFAULT_TIMEOUT_S
from attndeploy.serving.client.errors import STATUS_DEADLINE, STATUS_NOT_HTTP, STATUS_UNAVAILABLE

HTTP_PROBE_TIMEOUT_S = 2.0  # `answers_http`: how long a server that says nothing is waited for


def answers_http(url: str, timeout_s: float = HTTP_PROBE_TIMEOUT_S) -> bool:
    """Whether an HTTP/1.1 server answers at `url` (host:port): a GET of the KServe liveness
    path gets any answer. Tells the HTTP port from the gRPC one when a gRPC call fails."""
    host, _, port = url.rpartition(":")
    try:
        connection = HTTPConnection(host.strip("[]"), int(port), timeout=timeout_s)
        try:
            connection.request("GET", "/v2/health/live")
            connection.getresponse()
        finally:
            connection.close()
    except (OSError, ValueError, HTTPException):
        return False
    return True


class HttpClient:
    """`tritonclient.http` behind the subset of `tritonclient.grpc.InferenceServerClient` that
    attndeploy calls: same methods, keyword arguments (`as_json`, `client_timeout`), JSON
    shapes (`get_model_config` -> {"config": ...}, the index -> {"models": [...]}) and a
    callback `async_infer(model, inputs, callback, client_timeout=...)` whose callback gets
    `result=` and `error=`.

    The HTTP client is not thread-safe (gevent), so each thread, and each timeout, gets its own
    connection; `async_infer` runs requests on a pool of `workers` threads (the load tester sizes
    it to its concurrency, so no request waits for a thread). Errors are normalised as the module
    docstring of `client.errors` says: an answer that is not HTTP (the gRPC port) raises the
    status `STATUS_NOT_HTTP`, a connection closed before any answer `STATUS_UNAVAILABLE`.
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
        from geventhttpclient.response import HTTPConnectionClosed
        from tritonclient.utils import InferenceServerException

        try:
            return getattr(self._client(client_timeout), method)(*args, **kwargs)
        except InferenceServerException as exc:
            status = exc.status()
            code = f"HTTP {status}" if status and str(status).isdigit() else status
            raise InferenceServerException(msg=exc.message(), status=code) from exc
        except HTTPConnectionClosed as exc:  # closed before any answer: as good as refused
            raise InferenceServerException(msg="the server closed the connection without an "
                                           "answer", status=STATUS_UNAVAILABLE) from exc
        except HTTPException as exc:  # geventhttpclient's parser: the answer is not HTTP
            reason = exc.args[0] if exc.args and isinstance(exc.args[0], str) else str(exc)
            raise InferenceServerException(msg=reason, status=STATUS_NOT_HTTP) from exc
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
