"""Delayed links between tiers on real nodes over SSH: configured delay and rate against
measured ones, through the links relay the inventory cluster starts on the target host.

Three emulated Pi 3B nodes serving sshd (``tests.support.sshd``, as the inventory tests
and ``bench_ssh_overhead.py`` use them), an end device, an edge node and a cloud node by
their ``edgeprof_tier``, and an inventory ``edgeprof_links`` of Zhang's delays (250 ms
one way end-edge and edge-cloud, 500 ms end-cloud; ``--mbit`` puts a rate on end-cloud).
For each link: the first ``link_address`` (the relay started over SSH, its route asked),
then round trips of 64-byte messages through the relay and to the target directly, a
bulk transfer's rate, and the CPU time the relay used on the target host for it.

    sudo EDGEPROF_CLUSTER_INSTANCE=4 .venv/bin/python benchmarks/bench_inventory_tier_links.py

About a minute. An emulated cluster it brought up it takes down.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil  # noqa: E402

from profiler.cluster import emulated, link_probe, netns  # noqa: E402
from profiler.cluster.inventory.cluster import InventoryCluster  # noqa: E402
from profiler.cluster.inventory.hosts import read_inventory  # noqa: E402
from tests.support.sshd import SshdNodes  # noqa: E402

PORT = 7400
TIERS = {"n0": "end", "n1": "edge", "n2": "cloud"}


def _summary(values: list[float]) -> str:
    return (f"min {min(values):7.1f}  median {statistics.median(values):7.1f}  "
            f"max {max(values):7.1f}")


def _relay_cpu_s(node) -> float:
    """CPU seconds (user + system) of the links relay in ``node``'s namespace."""
    total = 0.0
    for pid in netns.netns_pids(node.scope.netns):
        try:
            proc = psutil.Process(pid)
            if "profiler.cluster.relay" in " ".join(proc.cmdline()):
                times = proc.cpu_times()
                total += times.user + times.system
        except psutil.Error:
            pass
    return total


def measure(cluster: InventoryCluster, netns_nodes: dict, count: int, work: Path) -> None:
    """``netns_nodes``: the emulated node under each host, by name (its namespace)."""
    nodes = {n.tier: n for n in cluster.nodes()}
    logs = work / "sweep" / "cells" / "bench" / "attempt-1" / "logs"
    servers = []
    try:
        for index, (key, link) in enumerate(sorted(cluster.tier_links().items())):
            low, high = key.split("-")
            source, target = nodes[low], nodes[high]
            port = PORT + index
            servers.append(link_probe.start_server(cluster, target, port,
                                                   logs / f"server-{key}.log"))
            started = time.monotonic()
            host, relay_port = cluster.link_address(source, target, port)
            first_s = time.monotonic() - started
            print(f"-- link {key} ({source.name} -> {target.name}): configured "
                  f"{link.delay_ms:g} ms one way" + (f", {link.mbit:g} Mbit" if link.mbit
                                                      else "") +
                  f"; first link_address {first_s:.2f} s; uptime: "
                  f"{os.popen('uptime').read().strip()}")
            args = ["ping", "--count", str(count), "--interval-s", "0.02", "--to"]
            delayed = link_probe.run_client(cluster, source, [*args, f"{host}:{relay_port}"],
                                            logs / f"ping-{key}.log")
            direct = link_probe.run_client(cluster, source,
                                           [*args, f"{target.address}:{port}"],
                                           logs / f"direct-{key}.log")
            rtt = delayed["rtt_ms"]
            print(f"   rtt    configured {2 * link.delay_ms:7.1f} ms  measured "
                  f"{_summary(rtt)} ms  median/configured "
                  f"{statistics.median(rtt) / (2 * link.delay_ms):.3f}")
            print(f"   direct                       {_summary(direct['rtt_ms'])} ms")
            size = int((link.mbit or 20) * 1e6 / 8 * 2)  # about 2 s at the link's rate
            cpu_before = _relay_cpu_s(netns_nodes[target.name])
            rate = link_probe.run_client(cluster, source, ["bulk", "--to",
                                                           f"{host}:{relay_port}",
                                                           "--bytes", str(size)],
                                         logs / f"bulk-{key}.log")
            cpu_s = _relay_cpu_s(netns_nodes[target.name]) - cpu_before
            print(f"   rate   measured {rate['mbit']:7.1f} Mbit"
                  + (f" (configured {link.mbit:g}, ratio {rate['mbit'] / link.mbit:.3f})"
                     if link.mbit else " (no rate of its own: the node links')")
                  + f"; relay CPU {cpu_s:.2f} s for {size / 1e6:.1f} MB "
                    f"({cpu_s / (size / 1e6) * 1000:.1f} ms per MB)")
    finally:
        for server in servers:
            link_probe.stop(server)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20, help="messages per measurement")
    parser.add_argument("--mbit", type=float, default=20.0, help="end-cloud's rate")
    args = parser.parse_args()
    cluster_up, brought_up = emulated.ensure_cluster(3)
    work = Path(tempfile.mkdtemp(prefix="bench-inv-links-"))
    try:
        with SshdNodes(cluster_up.nodes()[:3], work, cluster=cluster_up) as sshd:
            links = {"end-edge": {"delay_ms": 250}, "edge-cloud": {"delay_ms": 250},
                     "end-cloud": {"delay_ms": 500, "mbit": args.mbit}}
            inventory = sshd.write_inventory(
                work / "inventory.ini", {"master": ["n0"], "workers": ["n1", "n2"]},
                host_vars={n: {"edgeprof_workdir": str(work / f"remote-{n}"),
                               "edgeprof_python": sys.executable, "edgeprof_tier": tier}
                           for n, tier in TIERS.items()},
                group_vars_all={"edgeprof_links": json.dumps(links)})
            cluster = InventoryCluster(read_inventory(inventory))
            try:
                measure(cluster, {n.name: n for n in sshd.nodes}, args.count, work)
            finally:
                cluster.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)  # keys, sshd's files, the probes' logs
        if brought_up:
            emulated.down()


if __name__ == "__main__":
    main()
