"""The two ways to reach a Triton server, kept apart from the client so that the CLI can offer the
choice without importing numpy or tritonclient."""

from __future__ import annotations

from enum import Enum


class Protocol(str, Enum):
    """How to reach the server: gRPC (default port 8001) or HTTP/REST (KServe v2, port 8000)."""

    GRPC = "grpc"
    HTTP = "http"


DEFAULT_URLS = {Protocol.GRPC: "127.0.0.1:8001", Protocol.HTTP: "127.0.0.1:8000"}
