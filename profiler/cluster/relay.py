"""The delaying relay: a TCP proxy that holds what it reads for a link's delay and
forwards it no faster than the link's rate (the emulated cluster's links between tiers).

Why a relay: this kernel has no ``netem`` (nor ``fq``), so ``tc`` cannot delay a packet;
``tbf`` only limits a rate. The relay runs on the host, outside every node's cgroup (it is
the network, not a board), listening on the bridge's host address; a node of tier A
reaches a node of tier B through it (``links.link_address``), while nodes of one tier
talk directly. Both hops still cross the nodes' own shaped links.

The link model, per direction of each route (every connection to one target over one
link shares it, as they would share the wire): a chunk read at time t starts on the
wire when the link is free (``max(t, free_at)``), occupies it ``bytes / rate``, and is
delivered ``delay`` after it left (propagation), so a burst queues as on a real link and
the delay is a lower bound. Reading stops while more than ``rate x delay`` plus a buffer
is held, so the sender is paced by TCP's own flow control, as a real link paces it.
What it does not model: the TCP handshake (``connect`` returns at once; the engine's
first bytes pay the delay) and loss.

One process serves every link of a cluster: ``edgeprof cluster up`` starts it
(``links.start_relay``) and ``down`` stops it. It is run as a script, standard library
only (``python relay.py --host H --control SOCKET``), so it is the code of the checkout
that started it. Its control socket takes one JSON line per route,
``{"to": [address, port], "delay_ms": D, "mbit": R or null}``, and answers
``{"port": P}``: the port on ``--host`` that reaches ``to`` over that link (one
listener per route, reused when asked again), or ``{"error": "..."}``.

On the Swarm (``swarm/links.py``) it runs inside the target's task, without a control
socket: its routes are given up front (``--route LISTEN:HOST:PORT:DELAY_MS[:MBIT]``),
each on a port fixed by the controller, since the controller cannot reach the task.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket

# Per read: about 2 ms of the link's traffic (at least a full frame), so that a chunk's
# own serialisation does not delay its first byte much beyond a real link's; at most 64 KB.
CHUNK_S = 0.002
MIN_CHUNK_BYTES = 1500
MAX_CHUNK_BYTES = 65536
# What the relay holds per direction beyond what is in flight on the link (rate x delay):
# a router's queue, as long as the nodes' own tbf queues (netns.TBF_LATENCY_MS), so a
# message behind a bulk transfer waits at most about that much more.
QUEUE_S = 0.05
MIN_QUEUE_BYTES = 64 * 1024
# Without a rate the nodes' own links limit what arrives, and this what is held: a
# connection then carries at most 16 MB per one-way delay (537 Mbit at 250 ms), more
# than a real TCP window would let through such a link (docs/tiers.md).
UNLIMITED_HOLD_BYTES = 16 << 20


class Wire:
    """One direction of a route's link: its delay, its rate and when it is next free."""

    def __init__(self, delay_s: float, mbit: float | None):
        self.delay_s = delay_s
        self.rate_bytes_per_s = mbit * 1e6 / 8 if mbit else None
        self.free_at = 0.0

    def due(self, now: float, size: int) -> float:
        """When ``size`` bytes read at ``now`` reach the other end."""
        if not self.rate_bytes_per_s:
            return now + self.delay_s
        start = max(now, self.free_at)
        self.free_at = start + size / self.rate_bytes_per_s
        return self.free_at + self.delay_s


class Direction:
    """One direction of one relayed connection: its wire and what it holds."""

    def __init__(self, wire: Wire):
        self.wire = wire
        self.held_bytes = 0
        if wire.rate_bytes_per_s:
            self.chunk_bytes = int(min(MAX_CHUNK_BYTES, max(
                MIN_CHUNK_BYTES, wire.rate_bytes_per_s * CHUNK_S)))
            self.hold_limit = int(wire.rate_bytes_per_s * (wire.delay_s + QUEUE_S)) + \
                MIN_QUEUE_BYTES
        else:
            self.chunk_bytes = MAX_CHUNK_BYTES
            self.hold_limit = UNLIMITED_HOLD_BYTES
        self.queue: asyncio.Queue = asyncio.Queue()
        self.drained = asyncio.Event()


async def _read_side(reader: asyncio.StreamReader, way: Direction) -> None:
    loop = asyncio.get_running_loop()
    try:
        while True:
            data = await reader.read(way.chunk_bytes)
            way.queue.put_nowait((way.wire.due(loop.time(), len(data)), data))
            if not data:
                return
            way.held_bytes += len(data)
            while way.held_bytes > way.hold_limit:
                way.drained.clear()
                await way.drained.wait()
    except (ConnectionError, OSError):
        way.queue.put_nowait((loop.time(), b""))


async def _write_side(writer: asyncio.StreamWriter, way: Direction) -> None:
    loop = asyncio.get_running_loop()
    try:
        while True:
            due, data = await way.queue.get()
            wait_s = due - loop.time()
            if wait_s > 0:
                await asyncio.sleep(wait_s)
            if not data:
                if writer.can_write_eof():
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()
            way.held_bytes -= len(data)
            way.drained.set()
    except (ConnectionError, OSError):
        # Nothing more reaches this end: let the reading side go on to its end.
        way.held_bytes = 0
        way.drained.set()


def _no_delay(writer: asyncio.StreamWriter) -> None:
    # Small messages go out at once: the delay is the link's, not Nagle's.
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


async def _relay(client_r, client_w, to: tuple[str, int], wires: tuple[Wire, Wire]) -> None:
    try:
        server_r, server_w = await asyncio.open_connection(*to)
    except OSError:
        client_w.close()
        return
    _no_delay(client_w)
    _no_delay(server_w)
    up, down = Direction(wires[0]), Direction(wires[1])
    try:
        await asyncio.gather(_read_side(client_r, up), _write_side(server_w, up),
                             _read_side(server_r, down), _write_side(client_w, down))
    except asyncio.CancelledError:
        pass  # the relay stops (`cluster down`): its connections end with it
    finally:
        for writer in (client_w, server_w):
            writer.close()


class Relay:
    """The routes this process serves: (to, delay_ms, mbit) -> its listening port."""

    def __init__(self, host: str):
        self.host = host
        self.routes: dict[tuple, int] = {}
        self.servers: list[asyncio.AbstractServer] = []

    async def route(self, request: dict) -> dict:
        to = (str(request["to"][0]), int(request["to"][1]))
        delay_s = float(request["delay_ms"]) / 1000
        mbit = None if request.get("mbit") is None else float(request["mbit"])
        key = (to, delay_s, mbit)
        if key not in self.routes:
            wires = (Wire(delay_s, mbit), Wire(delay_s, mbit))
            server = await asyncio.start_server(
                lambda r, w: _relay(r, w, to, wires), self.host,
                int(request.get("listen", 0)))
            self.servers.append(server)
            self.routes[key] = server.sockets[0].getsockname()[1]
        return {"port": self.routes[key]}

    async def control(self, reader, writer) -> None:
        try:
            line = await reader.readline()
            try:
                answer = await self.route(json.loads(line))
            except (ValueError, KeyError, TypeError, IndexError, OSError) as exc:
                answer = {"error": f"{type(exc).__name__}: {exc}"}
            writer.write((json.dumps(answer) + "\n").encode())
            await writer.drain()
        finally:
            writer.close()


def parse_route(text: str) -> dict:
    """``LISTEN:HOST:PORT:DELAY_MS[:MBIT]`` as a route request (``Relay.route``)."""
    listen, host, port, delay_ms, *mbit = text.split(":")
    return {"listen": int(listen), "to": [host, int(port)], "delay_ms": float(delay_ms),
            "mbit": float(mbit[0]) if mbit and mbit[0] else None}


def route_arg(listen: int, to: tuple[str, int], delay_ms: float, mbit: float | None) -> str:
    """``parse_route``'s text of a route."""
    return f"{listen}:{to[0]}:{to[1]}:{delay_ms:g}" + (f":{mbit:g}" if mbit else "")


async def serve(host: str, control_path: str | None, routes: tuple[dict, ...] = ()) -> None:
    relay = Relay(host)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    for request in routes:
        await relay.route(request)
    control = None
    if control_path:
        if os.path.exists(control_path):
            os.unlink(control_path)
        control = await asyncio.start_unix_server(relay.control, control_path)
        os.chmod(control_path, 0o600)
    print("ready", flush=True)  # start_relay waits for this line
    try:
        await stop.wait()
    finally:
        if control is not None:
            control.close()
        for server in relay.servers:
            server.close()
        if control_path and os.path.exists(control_path):
            os.unlink(control_path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", required=True, help="address the routes listen on")
    parser.add_argument("--control", help="the control socket's path (routes asked there)")
    parser.add_argument("--route", action="append", type=parse_route, default=[],
                        help="a route served from the start: LISTEN:HOST:PORT:DELAY_MS[:MBIT]")
    args = parser.parse_args(argv)
    if not args.control and not args.route:
        parser.error("give --control, --route, or both")
    asyncio.run(serve(args.host, args.control, tuple(args.route)))


if __name__ == "__main__":
    main()
