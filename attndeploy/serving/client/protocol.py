"""The two ways to reach a Triton server, kept apart from the client so that the CLI can offer the
choice without importing numpy or tritonclient."""

from __future__ import annotations

import re
from enum import Enum

from attndeploy.errors import ServerError


class Protocol(str, Enum):
    """How to reach the server: gRPC (default port 8001) or HTTP/REST (KServe v2, port 8000)."""

    GRPC = "grpc"
    HTTP = "http"


DEFAULT_PORTS = {Protocol.GRPC: 8001, Protocol.HTTP: 8000}
DEFAULT_URLS = {protocol: f"127.0.0.1:{port}" for protocol, port in DEFAULT_PORTS.items()}

# host, or host:port; a host is a name, an IPv4 address or an IPv6 address in brackets
_ADDRESS = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.%\w]+\]|[^\s:\[\]?#]+)(?::(?P<port>[^:]*))?$")


def server_address(url: str, protocol: Protocol | str = Protocol.GRPC) -> str:
    """`url` as the `host:port` that tritonclient dials: a host without a port gets the
    protocol's default port (8001 for gRPC, 8000 for HTTP), as `localhost` -> `localhost:8001`;
    without it gRPC would dial port 443 and HTTP port 80, where no Triton server listens.

    ServerError in one line for what no Triton client can dial: a scheme (`http://...`: both
    clients take host:port alone), a path, a port that is not a number in 1-65535, an IPv6
    address outside brackets (`[::1]:8001`).
    """
    protocol = Protocol(protocol)
    text = url.strip()
    example = f"e.g. {DEFAULT_URLS[protocol]}"
    if not text:
        raise ServerError(f"the server address is empty; give host:port, {example}")
    if "://" in text:
        scheme, _, rest = text.partition("://")
        address = rest.split("/")[0] or DEFAULT_URLS[protocol]
        for_http = (", with --protocol http for HTTP"
                    if protocol is Protocol.GRPC and scheme.lower().startswith("http") else "")
        raise ServerError(f"the server address {url!r} has a scheme ({scheme}://); give "
                          f"host:port alone, e.g. {address}{for_http}")
    if "/" in text or "@" in text:
        raise ServerError(f"the server address {url!r} is not host:port (no path, no user); "
                          f"{example}")
    match = _ADDRESS.match(text)
    if match is None:
        if text.count(":") > 1 and "[" not in text:
            raise ServerError(f"the server address {url!r} looks like an IPv6 address; put it in "
                              f"brackets, e.g. [{text}]:{DEFAULT_PORTS[protocol]}")
        raise ServerError(f"the server address {url!r} is not host:port; {example}")
    host, port = match["host"], match["port"]
    if port is None:
        return f"{host}:{DEFAULT_PORTS[protocol]}"
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ServerError(f"the server address {url!r} has port {port!r}; a port is a number "
                          f"from 1 to 65535, {example}")
    return f"{host}:{int(port)}"
