"""The request guard: a small proxy in front of tritonserver's gRPC and HTTP endpoints that
answers the requests known to end the server (`guard_checks`) itself and passes everything else
through unchanged, bytes for bytes.

`TritonServer` starts it by default: tritonserver then listens on loopback ports of its own,
and the guard on the ports and address that were asked for. The metrics endpoint is not
guarded (it takes no request body). Run as `python -m attndeploy.serving.server.guard ...`
(`guard_command`), one process, asyncio: gRPC through `grpc.aio` with generic handlers (the
inference service's methods are forwarded as raw bytes; only a ModelInferRequest that names the
classification parameter is parsed), HTTP through aiohttp (the body is read once, checked,
forwarded; the answer is streamed back as it comes, server-sent events included).

What it costs: a request crosses one more loopback hop and one more process; see
benchmarks/README.md (`guard_overhead.py`). It exits when the server it guards exits, and it
carries the server's shared-memory prefix on its command line so that `stop` finds and ends it
like the server's other leftovers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import signal
import sys
import zlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

from attndeploy.serving.server import guard_checks as checks
from attndeploy.serving.server.processes import GUARD_MODULE, _pid_alive, guard_marker_argument

MODULE = GUARD_MODULE
MAX_MESSAGE_BYTES = 2**31 - 1  # gRPC's own ceiling, which tritonserver uses too
MAX_HTTP_BODY_BYTES = 2**31 - 1
SERVICE = "/inference.GRPCInferenceService/"
INFER, STREAM_INFER, METADATA = (SERVICE + name for name in
                                 ("ModelInfer", "ModelStreamInfer", "ModelMetadata"))
# Metadata a gRPC server adds itself: forwarding it would be refused or duplicated.
_RESERVED_METADATA = ("user-agent", "te", "content-type", "grpc-", ":")
# Headers of one hop (RFC 9110 7.6.1), which a proxy never forwards; and the ones aiohttp sets.
_HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
               "trailer", "transfer-encoding", "upgrade", "host", "content-length", "expect"}
_INFER_PATH = re.compile(r"^/v2/models/(?P<model>[^/]+)(?:/versions/(?P<version>[^/]+))?/infer$")
SERVER_POLL_S = 0.5


def guard_command(*, host: str, grpc_port: int, http_port: int, upstream_grpc_port: int,
                  upstream_http_port: int, server_pid: int, marker: str) -> list[str]:
    """The command line that runs the guard (this interpreter, this module)."""
    return [sys.executable, "-m", MODULE, f"--host={host}", f"--grpc-port={grpc_port}",
            f"--http-port={http_port}", f"--upstream-grpc-port={upstream_grpc_port}",
            f"--upstream-http-port={upstream_http_port}", f"--server-pid={server_pid}",
            guard_marker_argument(marker)]


def _bind_address(host: str, port: int) -> str:
    return f"[{host.strip('[]')}]:{port}" if ":" in host else f"{host}:{port}"


class OutputTypes:
    """Each served model's output datatypes, asked of tritonserver once per model and version
    (what is served is fixed while it runs); {} for a model it does not know."""

    def __init__(self, fetch: Any) -> None:
        self._fetch = fetch  # async (model, version) -> {output: datatype}, raises on failure
        self._known: dict[tuple[str, str], dict[str, str]] = {}

    async def of(self, model: str, version: str) -> dict[str, str]:
        key = (model, version)
        if key not in self._known:
            try:
                self._known[key] = await self._fetch(model, version)
            except Exception:  # noqa: BLE001 - unknown model, server gone: Triton answers it
                return {}
        return self._known[key]


# ----------------------------------------------------------------------------------------- gRPC


class GrpcGuard:
    """Generic handlers that forward every method of the inference service to `channel`."""

    def __init__(self, channel: Any) -> None:
        from tritonclient.grpc import service_pb2

        self._pb = service_pb2
        self._channel = channel
        self.types = OutputTypes(self._fetch_types)

    async def _fetch_types(self, model: str, version: str) -> dict[str, str]:
        call = self._channel.unary_unary(
            METADATA, request_serializer=self._pb.ModelMetadataRequest.SerializeToString,
            response_deserializer=self._pb.ModelMetadataResponse.FromString)
        answer = await call(self._pb.ModelMetadataRequest(name=model, version=version),
                            timeout=10.0)
        return {output.name: output.datatype for output in answer.outputs}

    async def refusal(self, data: bytes) -> tuple[Any, str] | None:
        """(the parsed request, why) when the guard answers this ModelInferRequest itself."""
        request = checks.grpc_classification_request(data, self._pb.ModelInferRequest.FromString)
        if request is None:
            return None
        types = await self.types.of(request.model_name, request.model_version)
        try:
            checks.check_requested_outputs(request.model_name,
                                           checks.grpc_requested_outputs(request), types)
        except checks.GuardRefusal as exc:
            return request, str(exc)
        return None

    def handler(self) -> Any:
        import grpc

        guard = self

        class Handler(grpc.GenericRpcHandler):
            def service(self, details: Any) -> Any:
                if details.method == STREAM_INFER:
                    return grpc.stream_stream_rpc_method_handler(guard._stream(details.method))
                return grpc.unary_unary_rpc_method_handler(guard._unary(details.method))

        return Handler()

    @staticmethod
    def _metadata(context: Any) -> list[tuple[str, Any]]:
        return [(key, value) for key, value in context.invocation_metadata() or ()
                if not key.startswith(_RESERVED_METADATA)]

    def _unary(self, method: str) -> Any:
        import grpc

        call = self._channel.unary_unary(method)

        async def forward(data: bytes, context: Any) -> bytes:
            if method == INFER:
                refused = await self.refusal(data)
                if refused is not None:
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, refused[1])
            try:
                return await call(data, metadata=self._metadata(context),
                                  timeout=context.time_remaining())
            except grpc.aio.AioRpcError as exc:
                await context.abort(exc.code(), exc.details() or "")

        return forward

    def _stream(self, method: str) -> Any:
        """A bidirectional stream: each request is checked as it comes; a refused one is
        answered in the stream with its error (as Triton answers a failed request there), and
        the stream goes on."""
        import grpc

        open_call = self._channel.stream_stream(method)

        async def forward(requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
            call = open_call(metadata=self._metadata(context), timeout=context.time_remaining())
            answers: asyncio.Queue[bytes | None] = asyncio.Queue()

            async def send() -> None:
                try:
                    async for data in requests:
                        refused = await self.refusal(data)
                        if refused is None:
                            await call.write(data)
                            continue
                        request, why = refused
                        answer = self._pb.ModelStreamInferResponse(
                            error_message=why, infer_response=self._pb.ModelInferResponse(
                                model_name=request.model_name,
                                model_version=request.model_version, id=request.id))
                        await answers.put(answer.SerializeToString())
                    await call.done_writing()
                except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
                    pass  # the upstream stream ended; receive() reports how

            async def receive() -> None:
                try:
                    while (data := await call.read()) is not grpc.aio.EOF:
                        await answers.put(data)
                finally:
                    await answers.put(None)

            sender, receiver = asyncio.create_task(send()), asyncio.create_task(receive())
            try:
                while (data := await answers.get()) is not None:
                    yield data
                with contextlib.suppress(grpc.aio.AioRpcError):
                    await receiver
                code = await call.code()
                if code != grpc.StatusCode.OK:
                    await context.abort(code, await call.details() or "")
            finally:
                sender.cancel()
                receiver.cancel()
                call.cancel()  # a client that left frees the server's side of the stream

        return forward


async def _serve_grpc(host: str, port: int, upstream_port: int) -> Any:
    import grpc

    options = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
               ("grpc.max_send_message_length", MAX_MESSAGE_BYTES)]
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{upstream_port}", options=options)
    server = grpc.aio.server(options=options)
    server.add_generic_rpc_handlers([GrpcGuard(channel).handler()])
    if server.add_insecure_port(_bind_address(host, port)) == 0:
        raise OSError(f"could not bind gRPC to {_bind_address(host, port)}")
    await server.start()
    return server


# ----------------------------------------------------------------------------------------- HTTP


def _decoded_body(body: bytes, encoding: str | None) -> bytes:
    """The body as Triton will read it: gzip and deflate request bodies are decompressed
    (bounded) so that their JSON is checked too; other encodings are Triton's to refuse."""
    if encoding not in ("gzip", "deflate"):
        return body
    try:
        inflater = zlib.decompressobj(wbits=31 if encoding == "gzip" else 15)
        return inflater.decompress(body, MAX_HTTP_BODY_BYTES)
    except zlib.error:
        return body


def _error_response(status: int, message: str) -> Any:
    from aiohttp import web

    return web.json_response({"error": message}, status=status)


class HttpGuard:
    """One aiohttp handler for every path: check, forward, stream the answer back."""

    def __init__(self, upstream_port: int) -> None:
        self._base = f"http://127.0.0.1:{upstream_port}"
        self._session: Any = None
        self.types = OutputTypes(self._fetch_types)

    async def start(self) -> None:
        import aiohttp

        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=None),
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding"))  # only the client's own

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def _fetch_types(self, model: str, version: str) -> dict[str, str]:
        path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "")
        async with self._session.get(self._base + path) as answer:
            answer.raise_for_status()
            metadata = await answer.json()
        return {output["name"]: output["datatype"] for output in metadata.get("outputs", [])}

    async def _refusal(self, request: Any, body: bytes) -> str | None:
        part = checks.http_json_part(_decoded_body(body, request.headers.get(
            "Content-Encoding")), request.headers)
        try:
            checks.check_json_depth(part)
            match = _INFER_PATH.match(request.path)
            parsed = checks.http_classification_request(part) if match else None
            if parsed is not None:
                model, version = match["model"], match["version"] or ""
                checks.check_requested_outputs(model, checks.http_requested_outputs(parsed),
                                               await self.types.of(model, version))
        except checks.GuardRefusal as exc:
            return str(exc)
        return None

    async def handle(self, request: Any) -> Any:
        import aiohttp
        from aiohttp import web

        body = await request.read()
        if body and request.method in ("POST", "PUT", "PATCH"):
            why = await self._refusal(request, body)
            if why is not None:
                return _error_response(400, why)
        headers = {key: value for key, value in request.headers.items()
                   if key.lower() not in _HOP_BY_HOP}
        try:
            async with self._session.request(request.method, self._base + request.path_qs,
                                             headers=headers, data=body or None) as answer:
                reply = web.StreamResponse(status=answer.status, reason=answer.reason, headers={
                    key: value for key, value in answer.headers.items()
                    if key.lower() not in _HOP_BY_HOP - {"content-length"}})
                await reply.prepare(request)
                async for chunk in answer.content.iter_any():
                    await reply.write(chunk)
                await reply.write_eof()
                return reply
        except aiohttp.ClientConnectionError:
            return _error_response(503, "tritonserver is not answering")


async def _serve_http(host: str, port: int, upstream_port: int) -> tuple[Any, HttpGuard]:
    from aiohttp import web

    guard = HttpGuard(upstream_port)
    await guard.start()
    app = web.Application(client_max_size=MAX_HTTP_BODY_BYTES)
    app.router.add_route("*", "/{tail:.*}", guard.handle)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, host.strip("[]"), port).start()
    return runner, guard


# ----------------------------------------------------------------------------------------- main


async def _run(args: argparse.Namespace) -> None:
    grpc_server = await _serve_grpc(args.host, args.grpc_port, args.upstream_grpc_port)
    runner, http_guard = await _serve_http(args.host, args.http_port, args.upstream_http_port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        while not stop.is_set() and _pid_alive(args.server_pid):
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), SERVER_POLL_S)
    finally:
        await grpc_server.stop(grace=1.0)
        await runner.cleanup()
        await http_guard.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=MODULE, description=__doc__.splitlines()[0])
    parser.add_argument("--host", required=True)
    for name in ("grpc-port", "http-port", "upstream-grpc-port", "upstream-http-port",
                 "server-pid"):
        parser.add_argument(f"--{name}", type=int, required=True)
    parser.add_argument("--marker", required=True, help="the guarded server's shm prefix")
    args = parser.parse_args(argv)
    try:
        asyncio.run(_run(args))
    except OSError as exc:
        print(f"attndeploy request guard: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
