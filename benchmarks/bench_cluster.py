"""Benchmark of the emulated cluster: ``up``/``down`` time, and the agent's byte counts.

Run as root: ``python benchmarks/bench_cluster.py [--nodes 10] [--repeats 3]``.

1. Brings ``--nodes`` pi3b nodes up and down ``--repeats`` times and prints the times.
2. On that cluster, runs the metrics agent (as the cell runner does: in the node's
   namespace, outside its cgroup) on n0 and n1, sends a known TCP transfer n0 -> n1 and
   compares the bytes the agents counted with the bytes that transfer put on the wire:
   payload plus one Ethernet+IPv4+TCP header per segment, the segment size read from the
   sender's socket (TCP_MAXSEG). Target: ratio within 1 +/- 0.02.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from profiler.metrics.launch import agent_argv  # noqa: E402
from profiler.agent.spool_reader import read_points  # noqa: E402
from profiler.cluster import emulated  # noqa: E402
from profiler.cluster.base import kill_group  # noqa: E402

PORT = 5301
# Ethernet 14 + IPv4 20 + TCP 20 + timestamps option 12 (Linux's default).
HEADER_BYTES = 14 + 20 + 32
RECEIVER = textwrap.dedent("""
    import socket, sys
    srv = socket.create_server((sys.argv[1], int(sys.argv[2])))
    print("listening", flush=True)
    conn, _ = srv.accept()
    while conn.recv(1 << 16):
        pass
""")
SENDER = textwrap.dedent("""
    import socket, sys
    c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
    c.sendall(b"x" * int(sys.argv[3]))
    print(c.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG), flush=True)
    c.close()
""")


def time_up_down(nodes: int, repeats: int) -> tuple[list[float], list[float]]:
    up_s, down_s = [], []
    for _ in range(repeats):
        start = time.monotonic()
        emulated.up(nodes, "pi3b")
        up_s.append(time.monotonic() - start)
        start = time.monotonic()
        emulated.down()
        down_s.append(time.monotonic() - start)
    return up_s, down_s


def _wait_for(path: Path, text: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in (path.read_text() if path.exists() else ""):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path} never said {text!r}")
        time.sleep(0.05)


def _counted(spool: Path, field: str) -> tuple[int, int]:
    """(bytes, packets) the agent's eth0 counters grew by over the whole spool."""
    points = [p for _, p in read_points(spool) if p.measurement == "net"
              and p.tags.get("interface") == "eth0"]
    first, last = points[0].fields, points[-1].fields
    return (last[f"{field}_bytes"] - first[f"{field}_bytes"],
            last[f"{field}_packets"] - first[f"{field}_packets"])


def agent_ratio(cluster, payload_bytes: int, work: Path, interval_s: float = 0.5) -> dict:
    n0, n1 = cluster.nodes()[:2]
    agents = [cluster.start(node, agent_argv(node, work / f"spool-{node.name}",
                                             work / "pids.json", {"bench": "cluster"},
                                             interval_s),
                            {}, work / f"agent-{node.name}.log", confine=False)
              for node in (n0, n1)]
    try:
        time.sleep(3 * interval_s)  # a first sample before the transfer
        rx = cluster.start(n1, [sys.executable, "-u", "-c", RECEIVER, n1.address, str(PORT)],
                           {}, work / "rx.log")
        _wait_for(work / "rx.log", "listening")
        start = time.monotonic()
        tx = cluster.start(n0, [sys.executable, "-u", "-c", SENDER, n1.address, str(PORT),
                                str(payload_bytes)], {}, work / "tx.log")
        if tx.wait(timeout=120) != 0 or rx.wait(timeout=30) != 0:
            raise RuntimeError(f"transfer failed, see {work}")
        seconds = time.monotonic() - start
        time.sleep(3 * interval_s)  # a last sample after it
    finally:
        for proc in agents:
            kill_group(proc)
    mss = int((work / "tx.log").read_text().split()[-1])
    wire_bytes = payload_bytes + math.ceil(payload_bytes / mss) * HEADER_BYTES
    sent_bytes, sent_packets = _counted(work / f"spool-{n0.name}", "sent")
    recv_bytes, recv_packets = _counted(work / f"spool-{n1.name}", "recv")
    return {"payload_bytes": payload_bytes, "mss": mss, "wire_bytes": wire_bytes,
            "seconds": seconds, "goodput_mbit": payload_bytes * 8 / seconds / 1e6,
            "sender_counted_bytes": sent_bytes, "sender_counted_packets": sent_packets,
            "receiver_counted_bytes": recv_bytes, "receiver_counted_packets": recv_packets,
            "sender_ratio": sent_bytes / wire_bytes, "receiver_ratio": recv_bytes / wire_bytes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--payload-mb", type=float, default=20.0)
    args = parser.parse_args()

    emulated.down()
    up_s, down_s = time_up_down(args.nodes, args.repeats)
    print(f"cluster up   {args.nodes} nodes: mean {statistics.mean(up_s):.2f} s, "
          f"min {min(up_s):.2f} s over {args.repeats}")
    print(f"cluster down {args.nodes} nodes: mean {statistics.mean(down_s):.2f} s, "
          f"min {min(down_s):.2f} s over {args.repeats}")

    cluster = emulated.up(args.nodes, "pi3b")
    try:
        with tempfile.TemporaryDirectory(prefix="edgeprof-bench-") as work:
            result = agent_ratio(cluster, int(args.payload_mb * 1e6), Path(work))
    finally:
        emulated.down()
    print(f"transfer n0 -> n1: {result['payload_bytes']} payload bytes, MSS {result['mss']}, "
          f"{result['wire_bytes']} wire bytes expected, {result['goodput_mbit']:.1f} Mbit/s "
          f"(timed from the sender's start)")
    for side in ("sender", "receiver"):
        print(f"agent on the {side}: {result[f'{side}_counted_bytes']} bytes in "
              f"{result[f'{side}_counted_packets']} packets, ratio to wire bytes "
              f"{result[f'{side}_ratio']:.4f} (target 1 +/- 0.02)")


if __name__ == "__main__":
    main()
