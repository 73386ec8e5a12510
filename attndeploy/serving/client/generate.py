"""A client of a served generate model (`<name>_generate`, `packaging/generate_model.py`):
gRPC streaming (tritonclient's `start_stream` / `async_stream_infer`) and HTTP, Triton's
generate extension (`POST /v2/models/NAME/generate`, and `/generate_stream`: server-sent
events, one `data: {...}` per response).

Each call returns a `GenerateResult`: the text, the token ids, the finish reason and its clock
(time to the first piece, the arrival of each later piece), so `loadtest` measures time to first
token and inter-token latency with the same code the CLI prints with. `on_piece(text)` sees
each piece as it arrives. A request the server refuses raises ServerError with its message.
"""

from __future__ import annotations

import json
import queue
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attndeploy.errors import ServerError
from attndeploy.serving.client.protocol import Protocol, server_address

OnPiece = Callable[[str], None]
DEFAULT_TIMEOUT_S = 120.0


@dataclass
class GenerateParams:
    """A request's fields (None: left out, the model's default)."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: str | None = None
    num_beams: int | None = None  # a translation model's field: only 1 is served

    def json_fields(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass
class GenerateResult:
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str = ""
    started: float = 0.0  # perf_counter at the request
    arrivals: list[float] = field(default_factory=list)  # perf_counter of each piece with text

    @property
    def ttft_s(self) -> float | None:
        return self.arrivals[0] - self.started if self.arrivals else None

    @property
    def inter_token_s(self) -> list[float]:
        return [b - a for a, b in zip(self.arrivals, self.arrivals[1:], strict=False)]

    def add(self, text: str, token_ids: list[int], reason: str, on_piece: OnPiece | None
            ) -> None:
        if text or token_ids:
            self.arrivals.append(time.perf_counter())
        self.text += text
        self.token_ids.extend(token_ids)
        if reason:
            self.finish_reason = reason
        if on_piece is not None and text:
            on_piece(text)

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "token_ids": self.token_ids,
                "finish_reason": self.finish_reason}


def _grpc_inputs(client_module: Any, prompt: str | bytes, params: GenerateParams,
                 stream: bool) -> list[Any]:
    raw = prompt if isinstance(prompt, bytes) else prompt.encode("utf-8")
    values: list[tuple[str, np.ndarray]] = [("text_input", np.array([raw], dtype=np.object_))]
    kinds = {"max_tokens": np.int32, "temperature": np.float32, "top_k": np.int32,
             "top_p": np.float32, "seed": np.int64, "num_beams": np.int32}
    for name, dtype in kinds.items():
        value = getattr(params, name)
        if value is not None:
            values.append((name, np.array([value], dtype=dtype)))
    if params.stop is not None:
        values.append(("stop", np.array([params.stop.encode("utf-8")], dtype=np.object_)))
    values.append(("stream", np.array([stream], dtype=np.bool_)))
    types = {np.dtype(np.object_): "BYTES", np.dtype(np.int32): "INT32",
             np.dtype(np.float32): "FP32", np.dtype(np.int64): "INT64",
             np.dtype(np.bool_): "BOOL"}
    inputs = []
    for name, array in values:
        tensor = client_module.InferInput(name, list(array.shape), types[array.dtype])
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


def _piece(result: Any) -> tuple[str, list[int], str]:
    text = result.as_numpy("text_output")
    ids = result.as_numpy("token_ids")
    reason = result.as_numpy("finish_reason")

    def first(values: Any) -> str:
        if values is None or values.size == 0:
            return ""
        value = values.reshape(-1)[0]
        return value.decode("utf-8") if isinstance(value, bytes) else str(value)

    return first(text), [] if ids is None else [int(i) for i in ids.reshape(-1)], first(reason)


def grpc_generate(url: str, model: str, prompt: str | bytes, params: GenerateParams | None = None,
                  *, stream: bool = True, on_piece: OnPiece | None = None,
                  timeout_s: float = DEFAULT_TIMEOUT_S,
                  cancel_after: int | None = None) -> GenerateResult:
    """One generation over a gRPC stream. `cancel_after`: close the stream (cancel the request)
    once that many pieces arrived (a client that goes away), returning what came."""
    import tritonclient.grpc as grpcclient

    params = params or GenerateParams()
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client = grpcclient.InferenceServerClient(server_address(url, Protocol.GRPC))
    result = GenerateResult(started=time.perf_counter())
    try:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        client.async_stream_infer(model, _grpc_inputs(grpcclient, prompt, params, stream),
                                  enable_empty_final_response=True)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                answer, error = answers.get(timeout=max(deadline - time.monotonic(), 0.001))
            except queue.Empty:
                raise ServerError(f"{model}: no answer within {timeout_s:g} s") from None
            if error is not None:
                raise ServerError(f"{model}: {_message(error)}")
            text, ids, reason = _piece(answer)
            result.add(text, ids, reason, on_piece)
            final = answer.get_response().parameters.get("triton_final_response")
            if final is not None and final.bool_param:
                return result
            if cancel_after is not None and len(result.arrivals) >= cancel_after:
                client.stop_stream(cancel_requests=True)
                result.finish_reason = "cancelled"
                return result
    finally:
        try:
            client.stop_stream(cancel_requests=True)
        finally:
            client.close()


def _message(error: Any) -> str:
    message = getattr(error, "message", None)
    text = message() if callable(message) else str(error)
    return text.splitlines()[0] if text else "error"


def _post(url: str, path: str, body: dict[str, Any], timeout_s: float) -> Any:
    address = server_address(url, Protocol.HTTP)
    request = urllib.request.Request(f"http://{address}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        return urllib.request.urlopen(request, timeout=timeout_s)  # noqa: S310 (http only)
    except urllib.error.HTTPError as exc:
        try:
            detail = json.loads(exc.read().decode("utf-8", "replace")).get("error", "")
        except ValueError:
            detail = ""
        raise ServerError(f"{path}: HTTP {exc.code}: {detail or exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise ServerError(f"cannot reach {address}: {exc}") from None


def _from_json(event: dict[str, Any]) -> tuple[str, list[int], str]:
    ids = event.get("token_ids", [])
    ids = [ids] if isinstance(ids, int) else list(ids or [])
    return (str(event.get("text_output", "")), [int(i) for i in ids],
            str(event.get("finish_reason", "")))


def http_generate(url: str, model: str, prompt: str, params: GenerateParams | None = None, *,
                  stream: bool = False, on_piece: OnPiece | None = None,
                  timeout_s: float = DEFAULT_TIMEOUT_S) -> GenerateResult:
    """`/generate` (one response) or, with `stream`, `/generate_stream` (server-sent events)."""
    params = params or GenerateParams()
    body = {"text_input": prompt, **params.json_fields()}
    result = GenerateResult(started=time.perf_counter())
    if not stream:
        with _post(url, f"/v2/models/{model}/generate", body, timeout_s) as response:
            result.add(*_from_json(json.loads(response.read())), on_piece)
        return result
    body["stream"] = True
    with _post(url, f"/v2/models/{model}/generate_stream", body, timeout_s) as response:
        for raw in response:
            line = raw.decode("utf-8").strip()
            if not line.startswith("data:"):
                continue
            event = json.loads(line[len("data:"):])
            if "error" in event:
                raise ServerError(f"{model}: {event['error']}")
            result.add(*_from_json(event), on_piece)
    return result


def generate(url: str, model: str, prompt: str, params: GenerateParams | None = None, *,
             protocol: Protocol | str = Protocol.GRPC, stream: bool = True,
             on_piece: OnPiece | None = None, timeout_s: float = DEFAULT_TIMEOUT_S
             ) -> GenerateResult:
    """One generation by `protocol` (gRPC: always a stream, `stream` asks for pieces)."""
    if Protocol(protocol) is Protocol.HTTP:
        return http_generate(url, model, prompt, params, stream=stream, on_piece=on_piece,
                             timeout_s=timeout_s)
    return grpc_generate(url, model, prompt, params, stream=stream, on_piece=on_piece,
                         timeout_s=timeout_s)
