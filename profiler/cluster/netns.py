"""Network plumbing of the emulated cluster: namespaces, veth pairs, a bridge, tbf shaping.

Each node is a network namespace ``edgeprof-<node>`` whose ``eth0`` is one end of a veth
pair; the other end (``edgeprof-<node>h``) is a port of the bridge ``edgeprof-br0``, like
a Pi's cable into a switch. The link is shaped with ``tbf`` on both ends' egress (the
node's upload on its ``eth0``, its download on the bridge port), since this kernel has no
``netem`` and tbf only shapes what leaves a device. Segmentation offloads are switched
off on both ends: with them a veth hands the kernel ~35 KB "packets" that tbf would pass
in bursts no wire allows.

The links carry 9000-byte frames (``LINK_MTU``), not a Pi's 1500, and their rate is set
so that TCP's payload goes at a 1500-byte Ethernet's pace (``tbf_rate_mbit``). Why: the
host's kernel does each packet's work (the TCP/IP path, the veth, the bridge, tbf) inline
in the sending node's system calls, charged to that node's CPU quota, which is calibrated
on compute. On a fast host a Pi's quota is a few hundredths of a core, and at 1500-byte
frames the packet work alone outgrew it: a 0.44 MB exchange over 100 Mbit took 1.43 x its
wire time at 0.02 cores and 1.90 x at 0.015 (1.02 at 0.06, this host's quota), so the
same board's exchange depended on the host's speed (issue 47). At 9000 bytes, six times
fewer packets, it took 0.98 x at both (docs/study.md, "The exchange on any host"). What
this changes: a node's packet counters count 9000-byte frames, and the headers' share of
its byte counters is 0.7% instead of a 1500-byte Ethernet's 4.4%.

Addresses: the private subnet ``10.213.0.0/24`` lives only on the bridge; node ``i`` is
``10.213.0.(i+1)`` and the host's end of the bridge is ``10.213.0.254`` (what a node uses
to reach a service on the host). Nothing is routed or forwarded anywhere else. These are
instance 0's; another emulated cluster on the same host (``EDGEPROF_CLUSTER_INSTANCE=k``,
see ``instance``) has ``edgeprof<k>-...`` and ``10.213.<k>.0/24``.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Sequence

from ..errors import ClusterError
from . import instance

# Instance 0's names are those below; another instance's carry its number
# (``instance``: ``edgeprof1-n0``, ``10.213.1.0/24``).
PREFIX = instance.NAME
BRIDGE = f"{PREFIX}-br0"
SUBNET_PREFIX = instance.SUBNET_PREFIX
SUBNET_BITS = 24
HOST_ADDRESS = f"{SUBNET_PREFIX}.254"
NODE_IFACE = "eth0"
MAX_NODES = 250
NETNS_DIR = Path("/run/netns")
COMMAND_TIMEOUT_S = 30
# tbf queues at most this long before dropping, about what a small switch port buffers.
TBF_LATENCY_MS = 50
ETHERNET_FRAME_BYTES = 1514
ETHERNET_HEADER_BYTES = 14
ETHERNET_MTU = 1500
LINK_MTU = 9000  # the emulated links' frames (module doc)
TCP_IP_HEADER_BYTES = 52  # IPv4 20, TCP 20, Linux's timestamps option 12
IPV6_CONF = Path("/proc/sys/net/ipv6/conf")


def netns_name(node_name: str) -> str:
    return f"{PREFIX}-{node_name}"


def host_veth_name(node_name: str) -> str:
    return f"{PREFIX}-{node_name}h"


def node_address(index: int) -> str:
    if not 0 <= index < MAX_NODES:
        raise ClusterError(f"node index {index} out of range: at most {MAX_NODES} nodes")
    return f"{SUBNET_PREFIX}.{index + 1}"


def run(argv: Sequence[str], netns: str | None = None) -> str:
    """Run one ``ip``/``tc``/``ethtool`` command (inside ``netns`` if given); raise on failure."""
    full = ["ip", "netns", "exec", netns, *argv] if netns else list(argv)
    try:
        done = subprocess.run(full, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    except FileNotFoundError as exc:
        raise ClusterError(f"{full[0]} not found: install iproute2 and ethtool "
                           f"(apt-get install iproute2 ethtool)") from exc
    except subprocess.TimeoutExpired as exc:
        raise ClusterError(f"`{' '.join(full)}` hung for {COMMAND_TIMEOUT_S} s") from exc
    if done.returncode != 0:
        message = (done.stderr.strip().splitlines() or ["exit status %d" % done.returncode])[-1]
        raise ClusterError(f"`{' '.join(full)}` failed: {message}")
    return done.stdout


def create_bridge() -> None:
    """The switch every node plugs into, with the host's address on it."""
    run(["ip", "link", "add", BRIDGE, "type", "bridge"])
    run(["ip", "addr", "add", f"{HOST_ADDRESS}/{SUBNET_BITS}", "dev", BRIDGE])
    _ipv6_off(BRIDGE)
    run(["ip", "link", "set", BRIDGE, "up"])


def create_node_network(node_name: str, index: int, link_mbit: float) -> str:
    """Create the node's namespace and shaped link; returns the node's address."""
    ns, host_end, address = netns_name(node_name), host_veth_name(node_name), node_address(index)
    run(["ip", "netns", "add", ns])
    if IPV6_CONF.is_dir():
        # Before eth0 exists, so it is born without IPv6 ("default" applies to new links).
        run(["sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1",
             "net.ipv6.conf.default.disable_ipv6=1"], ns)
    run(["ip", "link", "add", host_end, "type", "veth", "peer", "name", NODE_IFACE,
         "netns", ns])
    _ipv6_off(host_end)
    run(["ip", "link", "set", host_end, "master", BRIDGE, "up"])
    run(["ip", "-n", ns, "link", "set", "lo", "up"])
    run(["ip", "-n", ns, "addr", "add", f"{address}/{SUBNET_BITS}", "dev", NODE_IFACE])
    run(["ip", "-n", ns, "link", "set", NODE_IFACE, "up"])
    _offloads_off(host_end)
    _offloads_off(NODE_IFACE, ns)
    # Both ends; the bridge takes the smallest MTU of its ports, so all at LINK_MTU.
    run(["ip", "link", "set", host_end, "mtu", str(LINK_MTU)])
    run(["ip", "-n", ns, "link", "set", NODE_IFACE, "mtu", str(LINK_MTU)])
    shape(host_end, link_mbit)
    shape(NODE_IFACE, link_mbit, ns)
    return address


def _ipv6_off(device: str) -> None:
    # IPv6 autoconfiguration chatter (router and neighbour solicitations) would be
    # counted as the node's traffic; the cluster speaks IPv4 only.
    conf = IPV6_CONF / device / "disable_ipv6"
    if conf.exists():
        conf.write_text("1")


def _offloads_off(device: str, netns: str | None = None) -> None:
    run(["ethtool", "-K", device, "tso", "off", "gso", "off", "gro", "off"], netns)


def shape_link(node_name: str, link_mbit: float, latency_ms: float = None) -> None:
    """Set node ``node_name``'s link (both directions) to ``link_mbit``."""
    latency_ms = TBF_LATENCY_MS if latency_ms is None else latency_ms
    shape(host_veth_name(node_name), link_mbit, latency_ms=latency_ms)
    shape(NODE_IFACE, link_mbit, netns_name(node_name), latency_ms=latency_ms)


def tbf_rate_mbit(link_mbit: float, mtu: int) -> float:
    """The rate at which frames of ``mtu`` bytes carry TCP's payload as fast as a
    ``link_mbit`` Ethernet of 1500-byte frames does (bytes on the wire as tbf counts
    them: from the Ethernet header on)."""
    def payload_share(frame_mtu: int) -> float:
        return (frame_mtu - TCP_IP_HEADER_BYTES) / (frame_mtu + ETHERNET_HEADER_BYTES)
    return link_mbit * payload_share(ETHERNET_MTU) / payload_share(mtu)


def tbf_argv(device: str, link_mbit: float, latency_ms: float | None = None, *,
             mtu: int = ETHERNET_MTU) -> list[str]:
    """``tc`` limiting ``device``'s egress to ``link_mbit`` with a token bucket that queues
    at most ``latency_ms`` of traffic (default ``TBF_LATENCY_MS``), for frames of at most
    ``mtu`` bytes. Also what an emulated board's container runs on its own link
    (``cluster.swarm.boards``)."""
    rate_bytes_per_s = link_mbit * 1e6 / 8
    # One millisecond of traffic per burst (never less than a few 1500-byte frames, nor
    # than two of the largest: tbf drops a frame larger than its bucket) keeps the rate
    # smooth at the timer resolution without letting bursts exceed the wire.
    burst_bytes = max(4 * ETHERNET_FRAME_BYTES, 2 * (mtu + ETHERNET_HEADER_BYTES),
                      int(rate_bytes_per_s / 1000))
    return ["tc", "qdisc", "replace", "dev", device, "root", "tbf",
            "rate", f"{int(link_mbit * 1000)}kbit", "burst", str(burst_bytes),
            "latency", f"{latency_ms or TBF_LATENCY_MS:g}ms"]


def shape(device: str, link_mbit: float, netns: str | None = None, *,
          latency_ms: float | None = None) -> None:
    """Limit ``device``'s egress to ``link_mbit``, a 1500-byte Ethernet's pace, in frames of
    ``LINK_MTU`` (``tbf_argv``, ``tbf_rate_mbit``)."""
    argv = tbf_argv(device, tbf_rate_mbit(link_mbit, LINK_MTU), latency_ms, mtu=LINK_MTU)
    if netns:
        argv[1:1] = ["-n", netns]
    try:
        run(argv)
    except ClusterError as exc:
        if "unknown" in str(exc).lower():
            raise ClusterError("the kernel lacks the tbf qdisc (sch_tbf): `modprobe sch_tbf` "
                               "or use a kernel with CONFIG_NET_SCH_TBF") from exc
        raise


def interface_counters(netns: str, device: str = NODE_IFACE) -> dict[str, int]:
    """The device's byte and packet counters as the node sees them."""
    out = run(["ip", "-n", netns, "-j", "-s", "link", "show", "dev", device])
    stats = json.loads(out)[0]["stats64"]
    return {"rx_bytes": stats["rx"]["bytes"], "rx_packets": stats["rx"]["packets"],
            "tx_bytes": stats["tx"]["bytes"], "tx_packets": stats["tx"]["packets"]}


def list_netns() -> list[str]:
    """Namespaces carrying the edgeprof prefix."""
    if not NETNS_DIR.is_dir():
        return []
    return sorted(p.name for p in NETNS_DIR.iterdir() if p.name.startswith(f"{PREFIX}-"))


def list_links() -> list[str]:
    """Host interfaces carrying the edgeprof prefix (bridge and veth host ends)."""
    out = run(["ip", "-j", "link", "show"])
    return sorted(link["ifname"] for link in json.loads(out)
                  if link.get("ifname", "").startswith(f"{PREFIX}-"))


def netns_pids(netns: str) -> list[int]:
    """Processes living in ``netns`` (any cgroup, e.g. the unconfined metrics agent)."""
    try:
        return [int(p) for p in run(["ip", "netns", "pids", netns]).split()]
    except ClusterError:
        return []


def delete_link(name: str) -> None:
    run(["ip", "link", "del", name])


def delete_netns(name: str) -> None:
    run(["ip", "netns", "del", name])


def check_netns_support() -> None:
    """Raise one line when this kernel or process cannot create network namespaces."""
    if not os.path.exists("/proc/self/ns/net"):
        raise ClusterError("the kernel lacks network namespaces (CONFIG_NET_NS): the "
                           "emulated cluster needs them; use --cluster local")
