"""Ports and addresses: free ports, whether a port is free, loopback, and the exposure warning."""

from __future__ import annotations

import ipaddress
import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on `host` a moment ago (for tests; another process may take it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def free_ports(count: int = 3, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct ports that were free a moment ago (e.g. gRPC, HTTP, metrics)."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port(host)
        if port not in ports:
            ports.append(port)
    return ports


def _port_is_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # Like the server itself: a TIME_WAIT leftover of a stopped server does not block the port.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _client_host(host: str) -> str:
    """The address a client on this machine dials for a server bound to `host`."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def is_loopback_host(host: str) -> bool:
    """Whether `host` reaches this machine only: 127.0.0.0/8, ::1 or `localhost`."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # another host name: it may resolve to any interface


def exposure_warning(host: str) -> str | None:
    """One line to print when the server binds to `host` beyond loopback; None on loopback."""
    if is_loopback_host(host):
        return None
    return (
        f"--host {host or '(all interfaces)'} is not a loopback address and tritonserver has no "
        "authentication: anyone who reaches it can run the served models; put a reverse proxy "
        "with TLS and authentication in front of it (or, on Kubernetes, a Service with a "
        "NetworkPolicy)"
    )
