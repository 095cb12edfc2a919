"""The hierarchy's messages over plain TCP, and a link's delay held back in the sender.

A message is a 4-byte big-endian header length, a JSON header, then the raw bytes of
at most one NumPy array (its dtype and shape in the header). A request and its reply
are one message each, on a connection an end device keeps open to each upper node.

Why plain sockets, not ``torch.distributed``: inference here is request and reply
between many clients and one server, with arrays whose size changes per request (an
early exit sends up only its unconfident samples); Gloo's point-to-point needs the
receiver to know the size and a fixed world joined by every process up front, and one
device that fails ends the group. A socket is also what a delaying relay (the tiers
helper's, ``Link.address``) can sit in front of: the link dials whatever address it is
given.

The delay (``--tier-delay``) is held back in the application, as Zhang's evaluation set
its delays (HTTP requests held back by their sender): half before the request leaves,
half once the reply has arrived, so a round trip takes at least the tier's delay (the
work's "communication latency includes both sending and receiving latency").
"""

from __future__ import annotations

import json
import socket
import struct
import time

import numpy as np

_LEN = struct.Struct(">I")
CONNECT_TIMEOUT_S = 600.0  # an upper node trains its network before it listens
CONNECT_RETRY_S = 0.2


def send(sock: socket.socket, header: dict, array: np.ndarray | None = None) -> int:
    """Send one message; the bytes written."""
    header = dict(header)
    body = b""
    if array is not None:
        array = np.ascontiguousarray(array)
        header["array"] = {"dtype": array.dtype.str, "shape": list(array.shape)}
        body = array.tobytes()
    head = json.dumps(header).encode()
    data = _LEN.pack(len(head)) + head + body
    sock.sendall(data)
    return len(data)


def _read(sock: socket.socket, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("the peer closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def recv(sock: socket.socket) -> tuple[dict, np.ndarray | None, int]:
    """One message: its header, its array (None without) and the bytes read."""
    (n,) = _LEN.unpack(_read(sock, _LEN.size))
    header = json.loads(_read(sock, n))
    array, size = None, _LEN.size + n
    meta = header.pop("array", None)
    if meta is not None:
        dtype = np.dtype(meta["dtype"])
        count = int(np.prod(meta["shape"])) * dtype.itemsize
        array = np.frombuffer(_read(sock, count), dtype=dtype).reshape(meta["shape"])
        size += count
    return header, array, size


class Link:
    """A client's connection to one upper node: ``request`` sends and waits for the
    reply, holding back the link's delay; counts the bytes each way."""

    def __init__(self, name: str, address: str, delay_s: float = 0.0):
        self.name = name  # "end-edge", "end-cloud", "edge-cloud"
        self.address = address  # host:port to dial (a relay's, once the cluster has one)
        self.delay_s = delay_s
        self.bytes_sent = self.bytes_received = 0
        self._sock: socket.socket | None = None

    def connect(self, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
        """Connect and see the node answer a ``ping``, retrying until ``timeout_s``: the
        node may still be training its network, and a relay between tiers accepts the
        connection at once, then closes it when the node behind it does not listen yet."""
        host, port = self.address.rsplit(":", 1)
        deadline = time.monotonic() + timeout_s
        while True:
            sock = None
            try:
                sock = socket.create_connection((host, int(port)), timeout=timeout_s)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                send(sock, {"op": "ping"})
                recv(sock)
                self._sock = sock
                return
            except (OSError, ValueError):  # refused, reset, closed before the answer
                if sock is not None:
                    sock.close()
                if time.monotonic() > deadline:
                    raise ConnectionError(f"no {self.name} node answers at {self.address} "
                                          f"after {timeout_s:.0f} s") from None
                time.sleep(CONNECT_RETRY_S)

    def request(self, header: dict, array: np.ndarray | None = None
                ) -> tuple[dict, np.ndarray | None]:
        if self._sock is None:
            self.connect()
        time.sleep(self.delay_s / 2)
        self.bytes_sent += send(self._sock, header, array)
        reply, out, size = recv(self._sock)
        self.bytes_received += size
        time.sleep(self.delay_s / 2)
        if "error" in reply:
            raise RuntimeError(f"the {self.name} node failed: {reply['error']}")
        return reply, out

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
