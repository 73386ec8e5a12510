"""tritonclient errors as attndeploy sees them: their gRPC status and message, and the
`ServerError` that says what to do (no server, a deadline, an unknown model, anything else).

The HTTP client (`http_client.HttpClient`) raises the same gRPC statuses for a refused
connection or a timeout, so these apply to both protocols, and `STATUS_NOT_HTTP` for an answer
that is not HTTP at all (the gRPC port). gRPC has no status of its own for an answer that is not
HTTP/2 (the HTTP port): it is UNAVAILABLE with one of `NOT_GRPC_MESSAGES` in its message.
"""

from __future__ import annotations

from attndeploy.errors import ServerError
from attndeploy.serving.client.protocol import DEFAULT_URLS, Protocol

# gRPC status codes as tritonclient writes them in `InferenceServerException.status()`.
STATUS_UNAVAILABLE = "StatusCode.UNAVAILABLE"
STATUS_DEADLINE = "StatusCode.DEADLINE_EXCEEDED"
STATUS_NOT_FOUND = "StatusCode.NOT_FOUND"
STATUS_INVALID = "StatusCode.INVALID_ARGUMENT"
STATUS_UNKNOWN = "StatusCode.UNKNOWN"
CONNECTION_STATUSES = frozenset({STATUS_UNAVAILABLE})
STATUS_NOT_HTTP = "NOT_HTTP"  # attndeploy's: the HTTP client's answer was not HTTP
# What grpc writes (status UNAVAILABLE) when the server answers in HTTP/1.x, not HTTP/2 (grpc
# core's chttp2 transport: an HTTP/1 answer, or bytes that are no HTTP/2 frame).
NOT_GRPC_MESSAGES = ("Trying to connect an http1.x server", "Failed parsing HTTP/2")


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
    if status == STATUS_NOT_HTTP:
        return ServerError(
            f"The server at {url} does not speak HTTP ({message}); is it the gRPC port? use --url "
            f"{with_port(url, Protocol.HTTP)} or --protocol grpc"
        )
    if status in CONNECTION_STATUSES and any(text in message for text in NOT_GRPC_MESSAGES):
        return ServerError(
            f"The server at {url} does not speak gRPC ({message}); is it the HTTP port? use --url "
            f"{with_port(url, Protocol.GRPC)} or --protocol http"
        )
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


def with_port(url: str, protocol: Protocol) -> str:
    """`url`'s host with the default port of `protocol` (host:8000 for HTTP, host:8001 for
    gRPC)."""
    host = url.rpartition(":")[0] or url
    return f"{host}:{DEFAULT_URLS[protocol].rpartition(':')[2]}"
