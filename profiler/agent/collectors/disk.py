"""``disk``: all disks' IO counters together, with per-tick deltas and rates.

"All disks" as ``psutil.disk_io_counters()`` sums them: the whole devices of /sys/block
(not their partitions, which would count each IO twice). psutil decides that per line of
/proc/diskstats on every call, one ``access()`` each; here the devices are listed once at
start and the per-disk counters summed, which halves the read. A disk attached later is
not counted (as an interface that appears later is not, ``network``).
"""

from __future__ import annotations

import os

import psutil

from .base import Collector, Deltas, Sample, Unavailable, counter_fields

SYS_BLOCK = "/sys/block"


class Disk(Collector):
    FIELDS = counter_fields("disk", {
        "read_bytes": ("bytes", "bytes read"), "write_bytes": ("bytes", "bytes written"),
        "read_count": ("reads", "reads completed"),
        "write_count": ("writes", "writes completed")})

    def __init__(self):
        try:
            self.devices = frozenset(os.listdir(SYS_BLOCK))
        except OSError:
            self.devices = frozenset()
        if not self.devices or not psutil.disk_io_counters():
            raise Unavailable("disk IO counters")
        self._deltas = Deltas()
        self.collect()

    def collect(self) -> list[Sample]:
        # nowrap=False: a counter that goes back restarts its deltas (``Deltas``).
        per_disk = psutil.disk_io_counters(perdisk=True, nowrap=False)
        totals = {"read_bytes": 0, "write_bytes": 0, "read_count": 0, "write_count": 0}
        for name, io in per_disk.items():
            if name in self.devices:
                totals["read_bytes"] += io.read_bytes
                totals["write_bytes"] += io.write_bytes
                totals["read_count"] += io.read_count
                totals["write_count"] += io.write_count
        return [("disk", {}, self._deltas.fields("all", totals))]
