"""The emulated links between tiers: configured delay and rate against measured ones.

Brings up (or uses) an emulated cluster of a tiered mix (default ``ddnn-small``: Zhang's
delays, 250 ms one way end-edge, 500 ms end-cloud) and a second one of ``ddnn-small-wan``
(rates on the links), and for each link between tiers measures, through the links relay
(``Cluster.link_address``):

- one-way delays (each direction) and round trips of 64-byte messages, one at a time:
  idle; while 2 busy processes load the host's cores (``--cpu-load``); and while a bulk
  transfer fills the same link (``traffic``);
- the rate of a bulk transfer, against the link's configured rate (or the slower node
  link's, where the link has no rate of its own).

Prints configured vs measured and their ratio. The nodes share the host's clock, so a
one-way delay is measured directly. Run as root, e.g.::

    sudo EDGEPROF_CLUSTER_INSTANCE=4 .venv/bin/python benchmarks/bench_tier_links.py

About 1-2 minutes. A cluster it brought up it takes down; one that was up (of the
mix asked) it uses and leaves.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from profiler.cluster import emulated, link_probe  # noqa: E402
from profiler.cluster.profiles import load_catalog  # noqa: E402

PORT = 7100
BULK_BYTES = 3_000_000
BULK_MAX_BYTES = 200_000_000


def _spin(stop_at: float) -> None:
    while time.monotonic() < stop_at:
        pass


def _pick(nodes, tier):
    return next(n for n in nodes if n.tier == tier)


def _summary(values: list[float]) -> str:
    return (f"min {min(values):7.1f}  median {statistics.median(values):7.1f}  "
            f"max {max(values):7.1f}")


def measure_mix(mix: str, count: int, work: Path) -> None:
    catalog = load_catalog()
    members = catalog.mixes[mix]
    cluster, created = emulated.ensure_cluster(len(members), mix)
    servers = []
    try:
        nodes = cluster.nodes()
        print(f"\n== {mix}: {len(nodes)} nodes; uptime: {os.popen('uptime').read().strip()}")
        for key, link in catalog.tier_links(mix).items():
            low, high = key.split("-")
            source, target = _pick(nodes, low), _pick(nodes, high)
            port = PORT + len(servers)
            servers.append(link_probe.start_server(cluster, target, port,
                                                   work / f"{mix}-{key}-server.log"))
            host, relay_port = cluster.link_address(source, target, port)
            to = f"{host}:{relay_port}"
            print(f"-- link {key} ({source.name} {source.profile} -> {target.name} "
                  f"{target.profile}): configured {link.delay_ms:g} ms one way"
                  + (f", {link.mbit:g} Mbit" if link.mbit else ", no rate of its own"))
            ping_args = ["ping", "--to", to, "--count", str(count), "--interval-s", "0.02"]
            for load in ("idle", "cpu-load", "traffic"):
                spinners, bulk_thread = [], None
                if load == "cpu-load":
                    spinners = [multiprocessing.Process(target=_spin,
                                                        args=(time.monotonic() + 600,))
                                for _ in range(os.cpu_count() or 2)]
                    for p in spinners:
                        p.start()
                if load == "traffic":
                    bulk_thread = threading.Thread(target=link_probe.run_client, args=(
                        cluster, source, ["bulk", "--to", to, "--bytes",
                                          str(BULK_BYTES * 10)],
                        work / f"{mix}-{key}-bulkload.log"), daemon=True)
                    bulk_thread.start()
                try:
                    got = link_probe.run_client(cluster, source, ping_args,
                                                work / f"{mix}-{key}-{load}.log")
                finally:
                    for p in spinners:
                        p.terminate()
                        p.join()
                    if bulk_thread:
                        bulk_thread.join()
                for name, values, configured in (
                        ("up", got["up_ms"], link.delay_ms),
                        ("down", got["down_ms"], link.delay_ms),
                        ("rtt", got["rtt_ms"], 2 * link.delay_ms)):
                    ratio = statistics.median(values) / configured if configured else 0
                    print(f"   {load:<8} {name:<4} configured {configured:7.1f} ms  "
                          f"measured {_summary(values)} ms  median/configured {ratio:.3f}")
            expected = link.mbit or min(catalog.profiles[source.profile].link_mbit,
                                        catalog.profiles[target.profile].link_mbit)
            # About two seconds of the link's rate, so that timer jitter does not count.
            size = int(min(BULK_MAX_BYTES, max(BULK_BYTES, expected * 1e6 / 8 * 2)))
            rate = link_probe.run_client(cluster, source, ["bulk", "--to", to, "--bytes",
                                                           str(size)],
                                         work / f"{mix}-{key}-bulk.log")
            print(f"   rate     configured {expected:7.1f} Mbit "
                  f"({'link' if link.mbit else 'slower node link'})  measured "
                  f"{rate['mbit']:7.1f} Mbit  ratio {rate['mbit'] / expected:.3f}")
    finally:
        for server in servers:
            link_probe.stop(server)
        if created:
            emulated.down()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mix", action="append",
                        help="tiered mix (repeatable) [default: ddnn-small, ddnn-small-wan]")
    parser.add_argument("--count", type=int, default=20, help="messages per measurement")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-tier-links-") as work:
        for mix in args.mix or ["ddnn-small", "ddnn-small-wan"]:
            measure_mix(mix, args.count, Path(work))


if __name__ == "__main__":
    main()
