"""Free TCP ports, for the roles a cell starts (ps-lite root, Gloo rendezvous) and test servers.

A port is chosen at random *below* the kernel's ephemeral range
(``net.ipv4.ip_local_port_range``, 32768-60999 by default) and taken only if it binds
now. Not the port ``bind(0)`` gives: that one is ephemeral, and between the moment it is
freed here and the moment the role binds it, any outgoing connection on the host (a
Gloo mesh opens dozens) may be handed it as its own source port; a test run once lost a
cell to that (``EADDRINUSE`` on the parameter server's port). Ports below the range are
never given out that way, so only another process choosing the same one at random
could take it.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

PORT_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PORT = 10_000  # above the registered services most hosts run
TRIES = 50
# The system's randomness, not the random module's shared state: a sweep or test that
# seeds ``random`` must not make two processes draw the same ports in the same order.
_RANDOM = random.SystemRandom()


def _ephemeral_low(range_file: Path = PORT_RANGE_FILE) -> int:
    """The lowest port the kernel hands out as a source port (32768 if unreadable)."""
    try:
        return int(range_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _binds(address: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((address, port))
        except OSError:
            return False
    return True


def free_port(address: str = "127.0.0.1", range_file: Path = PORT_RANGE_FILE) -> int:
    """A TCP port free on ``address`` right now, below the ephemeral range when there is
    room (else the one the OS picks)."""
    high = _ephemeral_low(range_file) - 1
    if high > LOWEST_PORT:
        for _ in range(TRIES):
            port = _RANDOM.randint(LOWEST_PORT, high)
            if _binds(address, port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))
        return sock.getsockname()[1]
