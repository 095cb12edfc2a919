"""Measure a link between two emulated nodes: one-way delays, round trips and rate.

Run as a script on the nodes (standard library only): ``serve`` on the target node,
``ping`` or ``bulk`` on the source node, dialling what ``link_address`` gave. The nodes
of an emulated cluster share the host's clock (network namespaces, one kernel), so a
one-way delay is the receiver's ``time.monotonic()`` minus the sender's, with no clock
offset to estimate. Used by ``benchmarks/bench_tier_links.py`` and the tier links test.

    python link_probe.py serve --port 7000
    python link_probe.py ping --to 10.213.4.254:41234 --count 20 --interval-s 0.05
    python link_probe.py bulk --to 10.213.4.254:41234 --bytes 4000000

From the controller, ``start_server`` and ``run_client`` do the same on a cluster's nodes
(through ``Cluster.start``, outside the nodes' CPU quotas: the link is measured, not the
board's speed at running the probe).

``ping`` prints ``{"up_ms": [...], "down_ms": [...], "rtt_ms": [...]}`` (per message: to
the target, back, both); ``bulk`` sends that many bytes and prints ``{"mbit": R,
"bytes": N, "seconds": S}``, the rate the target received them at (first byte to last).
"""

from __future__ import annotations

import argparse
import os
import signal
import json
import socket
import socketserver
import struct
import sys
import time

PING = b"P"
BULK = b"B"
# A ping and its answer: the sender's clock, then the target's (padded to a frame-ish
# size so that a rate-limited link charges it like a small request).
PING_FORMAT = "!dd"
PING_BYTES = 64
BULK_HEADER = "!q"
CHUNK_BYTES = 65536


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        part = sock.recv(size - len(data))
        if not part:
            raise ConnectionError("closed early")
        data += part
    return data


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            kind = _read_exactly(sock, 1)
            if kind == PING:
                while True:
                    message = _read_exactly(sock, PING_BYTES)
                    sent, _ = struct.unpack_from(PING_FORMAT, message)
                    answer = struct.pack(PING_FORMAT, sent, time.monotonic())
                    sock.sendall(answer.ljust(PING_BYTES, b"\0"))
            elif kind == BULK:
                (size,) = struct.unpack(BULK_HEADER, _read_exactly(sock, 8))
                first = last = None
                got = 0
                while got < size:
                    part = sock.recv(CHUNK_BYTES)
                    if not part:
                        break
                    last = time.monotonic()
                    if first is None:
                        # The rate is of what came after the first read.
                        first, size, got = last, size - len(part), -len(part)
                    got += len(part)
                sock.sendall(struct.pack("!ddq", first or 0.0, last or 0.0, got))
        except (ConnectionError, OSError):
            return


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def serve(host: str, port: int) -> None:
    with _Server((host, port), _Handler) as server:
        print("ready", flush=True)
        server.serve_forever()


def _connect(to: str) -> socket.socket:
    host, port = to.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=120)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def ping(to: str, count: int, interval_s: float) -> dict:
    """``count`` messages one at a time, each after the previous one's answer."""
    up, down, rtt = [], [], []
    with _connect(to) as sock:
        sock.sendall(PING)
        for _ in range(count):
            sent = time.monotonic()
            sock.sendall(struct.pack(PING_FORMAT, sent, 0.0).ljust(PING_BYTES, b"\0"))
            _, arrived = struct.unpack_from(PING_FORMAT, _read_exactly(sock, PING_BYTES))
            back = time.monotonic()
            up.append((arrived - sent) * 1000)
            down.append((back - arrived) * 1000)
            rtt.append((back - sent) * 1000)
            time.sleep(interval_s)
    return {"up_ms": up, "down_ms": down, "rtt_ms": rtt}


def bulk(to: str, size: int) -> dict:
    """Send ``size`` bytes; the rate the target received them at."""
    with _connect(to) as sock:
        sock.sendall(BULK + struct.pack(BULK_HEADER, size))
        block = b"\1" * CHUNK_BYTES
        left = size
        while left > 0:
            sock.sendall(block[:min(left, CHUNK_BYTES)])
            left -= min(left, CHUNK_BYTES)
        first, last, got = struct.unpack("!ddq", _read_exactly(sock, 24))
    seconds = last - first
    return {"mbit": got * 8 / seconds / 1e6 if seconds > 0 else None,
            "bytes": got, "seconds": seconds}


def start_server(cluster, node, port: int, log_path, timeout_s: float = 30.0):
    """``serve`` on ``node`` of ``cluster``; the process, once it listens."""
    process = cluster.start(node, [sys.executable, __file__, "serve", "--port", str(port)],
                            {}, log_path, confine=False)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        if log_path.exists() and "ready" in log_path.read_text():
            return process
        time.sleep(0.05)
    stop(process)
    raise RuntimeError(f"the link probe's server did not start: see {log_path}")


def run_client(cluster, node, args: list[str], log_path, timeout_s: float = 300.0) -> dict:
    """``ping`` or ``bulk`` (``args``) on ``node``; what it printed."""
    process = cluster.start(node, [sys.executable, __file__, *args], {}, log_path,
                            confine=False)
    try:
        process.wait(timeout=timeout_s)
    finally:
        stop(process)
    lines = log_path.read_text().strip().splitlines()
    if process.returncode != 0 or not lines:
        raise RuntimeError(f"the link probe failed ({process.returncode}): see {log_path}")
    return json.loads(lines[-1])


def stop(process) -> None:
    """Stop a probe started by ``Cluster.start`` (its own process group)."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--host", default="0.0.0.0")
    s.add_argument("--port", type=int, required=True)
    p = sub.add_parser("ping")
    p.add_argument("--to", required=True)
    p.add_argument("--count", type=int, default=10)
    p.add_argument("--interval-s", type=float, default=0.05)
    b = sub.add_parser("bulk")
    b.add_argument("--to", required=True)
    b.add_argument("--bytes", type=int, required=True)
    args = parser.parse_args(argv)
    if args.command == "serve":
        serve(args.host, args.port)
    elif args.command == "ping":
        print(json.dumps(ping(args.to, args.count, args.interval_s)))
    else:
        print(json.dumps(bulk(args.to, args.bytes)))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
