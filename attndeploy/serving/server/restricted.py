"""Triton's admin APIs, closed to clients: the flags that restrict them, the key that opens them.

Triton has no authentication, and some of its APIs are not for clients at all. The system
shared-memory API lets a client register any `/dev/shm` key and have the server write an output
into it: registering the python backend's own region and asking for an output there aborted
the server (`boost::interprocess::lock_exception`), and a server often runs as root. So every
server attndeploy starts, locally or in a pod, restricts these protocol groups on both gRPC
(`--grpc-restricted-protocol`) and HTTP (`--http-restricted-api`) to requests that carry the
header `attndeploy-admin-key` with a key that no client has:

- `shared-memory`: system and CUDA shared-memory registration (inputs and outputs by region);
- `model-repository`: the repository index, load and unload (load/unload are refused anyway under
  `--model-control-mode=none`);
- `trace` and `logging`: their settings can be changed at run time.

Left open, for clients: `health`, `metadata`, `model-config`, `inference`, and `statistics`,
which only reads counts and times (Triton 2.51 has no statistics settings; the Prometheus
metrics port serves the same numbers) and which the load tester reads for the server's time split.

A local server draws a fresh key at each start (`new_admin_key`) and only the process that started
it knows it (`TritonServer.admin_key`; the readiness check reads the repository index with it); it
is never printed nor recorded. A pod's container draws its own from `/dev/urandom` as it starts
(`deploy/manifests.py`'s start script), which no client is told.
"""

from __future__ import annotations

import secrets

ADMIN_KEY_HEADER = "attndeploy-admin-key"  # gRPC metadata keys are lower case
# tritonserver reads a gRPC restriction's key from the metadata entry of this prefixed name.
GRPC_HEADER_PREFIX = "triton-grpc-protocol-"
RESTRICTED_PROTOCOLS = ("shared-memory", "model-repository", "trace", "logging")
OPEN_PROTOCOLS = ("health", "metadata", "model-config", "inference", "statistics")


def new_admin_key() -> str:
    """A fresh key for one server start: 256 random bits, URL-safe (no ',', ':' or '=')."""
    return secrets.token_urlsafe(32)


def restricted_api_arguments(key: str) -> list[str]:
    """tritonserver's flags that close `RESTRICTED_PROTOCOLS` on gRPC and HTTP to all but `key`.

    `key` is a literal key, or a shell variable (`$key`) a pod's start script expands.
    """
    groups = ",".join(RESTRICTED_PROTOCOLS)
    setting = f"{groups}:{ADMIN_KEY_HEADER}={key}"
    return [f"--grpc-restricted-protocol={setting}", f"--http-restricted-api={setting}"]


def admin_headers(key: str | None, protocol: str = "grpc") -> dict[str, str] | None:
    """The request headers that open the restricted groups over `protocol` ("grpc" or "http");
    None when the key is unknown."""
    if not key:
        return None
    name = GRPC_HEADER_PREFIX + ADMIN_KEY_HEADER if protocol == "grpc" else ADMIN_KEY_HEADER
    return {name: key}
