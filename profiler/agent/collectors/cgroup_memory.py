"""``mem`` of a node confined to a cgroup: usage minus inactive page cache (as docker does),
and the cgroup's own peak usage since the agent started (the kernel's high-water mark).

The emulated cluster makes a node's cgroup once per sweep, and a sweep starts an agent
beside each cell attempt: the agent resets the high-water mark when it starts (v1:
``0`` written to ``memory.max_usage_in_bytes``; v2: a write to ``memory.peak``, which
kernels from 6.12 take, and which then holds for the file the agent keeps open), so
``peak_mb`` is the cell's. Where it cannot reset it (not root, an older v2 kernel) the
mark spans earlier cells: ``peak_mb`` is left out.
"""

from __future__ import annotations

import logging
from pathlib import Path

import psutil

from ...cgroupfs import read_keyed
from .base import MB, Collector, Field, Sample, Unavailable
from .host_memory import MEM_FIELDS

log = logging.getLogger(__name__)


class CgroupMemory(Collector):
    FIELDS = MEM_FIELDS + (
        Field("mem", "peak_mb", "MB",
              "cgroup nodes: the cgroup's peak usage since the agent started, page cache "
              "included (memory.max_usage_in_bytes, v2 memory.peak): a peak between two "
              "ticks is in it"),)

    @classmethod
    def create(cls, config, spool):
        if not config.cgroup_memory or config.containers is not None:
            return None
        return cls(config.cgroup_memory, config.memory_mb)

    def __init__(self, cgroup_dir: str, limit_mb: float | None):
        self.path = Path(cgroup_dir)
        self.v2 = (self.path / "memory.current").exists()
        if not self.v2 and not (self.path / "memory.usage_in_bytes").exists():
            raise Unavailable(f"cgroup memory accounting in {cgroup_dir}")
        self.limit_mb = limit_mb or self._limit_mb()
        self._peak = self._reset_peak()

    def _reset_peak(self):
        """The open file of the cgroup's high-water mark, reset to now; None if it
        cannot be reset (then it would hold earlier cells' peaks)."""
        name = "memory.peak" if self.v2 else "memory.max_usage_in_bytes"
        try:
            handle = open(self.path / name, "r+b", buffering=0)
        except OSError as exc:
            log.info("no cgroup peak memory in %s: %s", self.path, exc)
            return None
        try:
            handle.write(b"reset\n" if self.v2 else b"0\n")
        except OSError as exc:
            handle.close()
            log.info("cgroup peak memory in %s cannot be reset (%s): no peak_mb",
                     self.path, exc)
            return None
        return handle

    def _peak_mb(self) -> dict:
        if self._peak is None:
            return {}
        self._peak.seek(0)
        return {"peak_mb": int(self._peak.read()) / MB}

    def _limit_mb(self) -> float:
        raw = (self.path / ("memory.max" if self.v2 else "memory.limit_in_bytes")).read_text()
        total = psutil.virtual_memory().total
        limit = total if raw.strip() == "max" else min(int(raw), total)
        return limit / MB

    def collect(self) -> list[Sample]:
        used_mb = used_bytes(self.path, self.v2) / MB
        return [("mem", {}, {"used_mb": used_mb,
                             "available_mb": max(0.0, self.limit_mb - used_mb),
                             "total_mb": self.limit_mb,
                             "used_percent": 100.0 * used_mb / self.limit_mb,
                             **self._peak_mb()})]


def used_bytes(cgroup_dir: Path, v2: bool) -> int:
    """The cgroup's memory usage less its inactive page cache (as docker counts it)."""
    if v2:
        usage = int((cgroup_dir / "memory.current").read_text())
        inactive = read_keyed(cgroup_dir / "memory.stat").get("inactive_file", 0)
    else:
        usage = int((cgroup_dir / "memory.usage_in_bytes").read_text())
        inactive = read_keyed(cgroup_dir / "memory.stat").get("total_inactive_file", 0)
    return max(0, usage - inactive)
