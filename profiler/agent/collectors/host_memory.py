"""``mem`` of the host (nodes without a memory cgroup)."""

from __future__ import annotations

import psutil

from .base import MB, Collector, Field, Sample

MEM_FIELDS = (
    Field("mem", "used_mb", "MB", "memory in use: host total - available (what the kernel "
                                  "cannot reclaim, page cache excluded); cgroup: usage - "
                                  "inactive page cache, as docker reports"),
    Field("mem", "available_mb", "MB", "memory available to new work"),
    Field("mem", "total_mb", "MB", "memory size; cgroup: its limit"),
    Field("mem", "used_percent", "%", "used_mb / total_mb"),
)


class HostMemory(Collector):
    FIELDS = MEM_FIELDS

    @classmethod
    def create(cls, config, spool):
        return None if config.cgroup_memory or config.containers else cls()

    def collect(self) -> list[Sample]:
        mem = psutil.virtual_memory()
        used = mem.total - mem.available
        return [("mem", {}, {"used_mb": used / MB, "available_mb": mem.available / MB,
                             "total_mb": mem.total / MB,
                             "used_percent": 100.0 * used / mem.total})]
