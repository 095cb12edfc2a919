"""``mem`` of a node confined to a cgroup: usage minus inactive page cache (as docker does)."""

from __future__ import annotations

from pathlib import Path

import psutil

from ...cgroupfs import read_keyed
from .base import MB, Collector, Sample, Unavailable
from .host_memory import MEM_FIELDS


class CgroupMemory(Collector):
    FIELDS = MEM_FIELDS

    @classmethod
    def create(cls, config, spool):
        if not config.cgroup_memory:
            return None
        return cls(config.cgroup_memory, config.memory_mb)

    def __init__(self, cgroup_dir: str, limit_mb: float | None):
        self.path = Path(cgroup_dir)
        self.v2 = (self.path / "memory.current").exists()
        if not self.v2 and not (self.path / "memory.usage_in_bytes").exists():
            raise Unavailable(f"cgroup memory accounting in {cgroup_dir}")
        self.limit_mb = limit_mb or self._limit_mb()

    def _limit_mb(self) -> float:
        raw = (self.path / ("memory.max" if self.v2 else "memory.limit_in_bytes")).read_text()
        total = psutil.virtual_memory().total
        limit = total if raw.strip() == "max" else min(int(raw), total)
        return limit / MB

    def collect(self) -> list[Sample]:
        if self.v2:
            usage = int((self.path / "memory.current").read_text())
            inactive = read_keyed(self.path / "memory.stat").get("inactive_file", 0)
        else:
            usage = int((self.path / "memory.usage_in_bytes").read_text())
            inactive = read_keyed(self.path / "memory.stat").get("total_inactive_file", 0)
        used_mb = max(0, usage - inactive) / MB
        return [("mem", {}, {"used_mb": used_mb,
                             "available_mb": max(0.0, self.limit_mb - used_mb),
                             "total_mb": self.limit_mb,
                             "used_percent": 100.0 * used_mb / self.limit_mb})]
