"""``disk``: all disks' IO counters together, with per-tick deltas and rates."""

from __future__ import annotations

import psutil

from .base import Collector, Deltas, Sample, Unavailable, counter_fields


class Disk(Collector):
    FIELDS = counter_fields("disk", {
        "read_bytes": ("bytes", "bytes read"), "write_bytes": ("bytes", "bytes written"),
        "read_count": ("reads", "reads completed"),
        "write_count": ("writes", "writes completed")})

    def __init__(self):
        if not psutil.disk_io_counters():
            raise Unavailable("disk IO counters")
        self._deltas = Deltas()
        self.collect()

    def collect(self) -> list[Sample]:
        io = psutil.disk_io_counters()
        if io is None:
            return []
        return [("disk", {}, self._deltas.fields("all", {
            "read_bytes": io.read_bytes, "write_bytes": io.write_bytes,
            "read_count": io.read_count, "write_count": io.write_count}))]
