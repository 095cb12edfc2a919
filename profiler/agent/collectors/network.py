"""``net``: each counted interface's bytes and packets, with per-tick deltas and rates."""

from __future__ import annotations

from typing import Iterable

import psutil

from .base import Collector, Deltas, Sample, Unavailable, counter_fields


class Network(Collector):
    FIELDS = counter_fields("net", {
        "sent_bytes": ("bytes", "bytes sent"), "recv_bytes": ("bytes", "bytes received"),
        "sent_packets": ("packets", "packets sent"),
        "recv_packets": ("packets", "packets received")})
    TAGS = {"interface": "net: the interface's name"}

    @classmethod
    def create(cls, config, spool):
        if config.containers is not None:
            return None  # the containers' own namespaces: ContainerNetwork
        # Fixed at start: an interface that appears later (a new veth) is not counted.
        return cls(config.interfaces or [name for name in psutil.net_if_addrs()
                                         if name != "lo"])

    def __init__(self, interfaces: Iterable[str] | None = None):
        self.interfaces = [name for name in (interfaces or []) if name]
        if not psutil.net_io_counters(pernic=True):
            raise Unavailable("network counters")
        self._deltas = Deltas()
        self.collect()

    def collect(self) -> list[Sample]:
        # nowrap=False: /proc/net/dev's counters are 64-bit (since Linux 2.6.36, 32-bit
        # Pi OS too), and a counter that goes back (an interface re-created) restarts
        # its deltas (``Deltas``); psutil's wrap bookkeeping cost a fifth of this read.
        counters = psutil.net_io_counters(pernic=True, nowrap=False)
        samples: list[Sample] = []
        for name in self.interfaces or sorted(counters):
            nic = counters.get(name)
            if nic is None:
                continue
            samples.append(("net", {"interface": name}, self._deltas.fields(name, {
                "sent_bytes": nic.bytes_sent, "recv_bytes": nic.bytes_recv,
                "sent_packets": nic.packets_sent, "recv_packets": nic.packets_recv})))
        return samples
