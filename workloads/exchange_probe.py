"""A step's exchange without the framework: one node's push to a server and its pull back.

The profile check (``profiler.calibrate.exchange``) runs this on two emulated nodes, in
their network namespaces and CPU quotas, to see whether the link between them carries a
training step's bytes in the time the profile's link rate says. A sync parameter-server
step moves a worker's gradients to the server (push) and the new weights back (pull);
the server answers when the push has arrived, so the two halves cross the link one
after the other. Here:

- ``serve`` (the server's node) accepts one connection and, for every request (an
  8-byte header: the bytes coming, the bytes to answer), reads them all and sends the
  answer;
- ``probe`` (the worker's node) times ``--rounds`` such rounds of ``--bytes`` each way
  (after ``--warmup`` untimed ones: TCP's window opening), then ``--rounds`` rounds of
  one byte each way (the per-message cost: two wake-ups of nodes under a CPU quota, the
  kernel's path, no payload), and writes ``{"rounds_s": [...], "tiny_s": [...]}`` as
  JSON to ``--out``.

No framework is imported (a process starts in a fraction of a second and is not slowed
by MXNet's start-up): both join the node's CPU quota (``node_limits``) before their
first round, as the training roles do before theirs.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import time

from .node_limits import join_cpu_limit

HEADER = struct.Struct("!II")  # bytes the request carries, bytes the answer carries
CHUNK = 1 << 16
CONNECT_S = 20.0  # the server's node may start a moment after the probe's


def _read(conn: socket.socket, count: int, buffer: bytearray) -> bool:
    """Read ``count`` bytes (into ``buffer``, reused); False when the peer closed."""
    view = memoryview(buffer)
    while count:
        got = conn.recv_into(view[:min(count, len(buffer))])
        if not got:
            return False
        count -= got
    return True


def serve(port: int) -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", port))
    listener.listen(1)
    join_cpu_limit()
    conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buffer, header = bytearray(CHUNK), bytearray(HEADER.size)
    answers: dict[int, bytes] = {}
    while _read(conn, HEADER.size, header):
        incoming, outgoing = HEADER.unpack(header)
        if not _read(conn, incoming, buffer):
            break
        conn.sendall(answers.setdefault(outgoing, bytes(outgoing)))
    conn.close()


def _connect(host: str, port: int) -> socket.socket:
    deadline = time.monotonic() + CONNECT_S
    while True:
        try:
            conn = socket.create_connection((host, port), timeout=CONNECT_S)
            conn.settimeout(None)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return conn
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def probe(host: str, port: int, size: int, rounds: int, warmup: int) -> dict:
    conn = _connect(host, port)
    join_cpu_limit()
    buffer = bytearray(CHUNK)

    def timed(count: int, payload: bytes) -> list[float]:
        request = HEADER.pack(len(payload), len(payload)) + payload
        out = []
        for _ in range(count):
            start = time.perf_counter()
            conn.sendall(request)
            if not _read(conn, len(payload), buffer):
                raise ConnectionError("the exchange probe's server closed the connection")
            out.append(time.perf_counter() - start)
        return out

    payload = bytes(size)
    timed(warmup, payload)
    found = {"rounds_s": timed(rounds, payload), "tiny_s": timed(rounds, b"\0")}
    conn.close()
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("role", choices=("serve", "probe"))
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host")
    parser.add_argument("--bytes", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    if args.role == "serve":
        serve(args.port)
        return
    found = probe(args.host, args.port, args.bytes, args.rounds, args.warmup)
    with open(args.out, "w") as handle:
        json.dump(found, handle)


if __name__ == "__main__":
    main()
