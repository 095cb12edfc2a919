"""Free TCP ports, for the roles a cell starts (ps-lite root, Gloo rendezvous) and test servers."""

from __future__ import annotations

import socket


def free_port(address: str = "127.0.0.1") -> int:
    """A TCP port free on ``address`` right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))
        return sock.getsockname()[1]
