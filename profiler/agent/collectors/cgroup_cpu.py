"""``cpu`` of a node confined to a cgroup, as % of the node's quota (``--cpu-cores``)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil

from ...cgroupfs import read_keyed
from .base import Collector, Field, Sample, Unavailable
from .host_cpu import CPU_FIELDS


class CgroupCpu(Collector):
    """cgroup v1 (cpuacct) or v2 (cpu.stat) usage over the tick, shared by the quota."""

    FIELDS = tuple(f for f in CPU_FIELDS if f.name != "iowait_percent") + (
        Field("cpu", "quota_cores", "cores", "the node's CPU quota (cgroup nodes only)"),)

    @classmethod
    def create(cls, config, spool):
        if not config.cgroup_cpu:
            return None
        return cls(config.cgroup_cpu, config.cpu_cores, config.board_cores)

    def __init__(self, cgroup_dir: str, quota_cores: float | None,
                 board_cores: int | None = None):
        self.path = Path(cgroup_dir)
        self.v2 = (self.path / "cpu.stat").exists() and not (self.path / "cpuacct.usage").exists()
        if not self.v2 and not (self.path / "cpuacct.usage").exists():
            raise Unavailable(f"cgroup CPU accounting in {cgroup_dir}")
        self.quota_cores = quota_cores or float(psutil.cpu_count() or 1)
        # The % is of the node's whole compute, as Ganglia's is of a board's four cores:
        # the core count says what one busy core of the board would show (25% on a Pi 3B).
        self.board = {"cores": int(board_cores)} if board_cores else {}
        self._clock_ticks_per_s = os.sysconf("SC_CLK_TCK")
        self._last = (time.monotonic(), self._usage_s())

    def _usage_s(self) -> tuple[float, float, float]:
        """(total, user, system) CPU seconds used by the cgroup so far."""
        if self.v2:
            stat = read_keyed(self.path / "cpu.stat")
            return (stat["usage_usec"] / 1e6, stat.get("user_usec", 0) / 1e6,
                    stat.get("system_usec", 0) / 1e6)
        total_s = int((self.path / "cpuacct.usage").read_text()) / 1e9
        stat = read_keyed(self.path / "cpuacct.stat")  # in USER_HZ ticks
        hz = self._clock_ticks_per_s
        return total_s, stat.get("user", 0) / hz, stat.get("system", 0) / hz

    def collect(self) -> list[Sample]:
        now, usage = time.monotonic(), self._usage_s()
        then, before = self._last
        self._last = (now, usage)
        capacity_s = max(now - then, 1e-9) * self.quota_cores
        shares = [100.0 * max(0.0, a - b) / capacity_s for a, b in zip(usage, before)]
        return [("cpu", {}, {"cpu_percent": shares[0], "user_percent": shares[1],
                             "system_percent": shares[2], "quota_cores": self.quota_cores,
                             "busy_s": usage[0],
                             **self.board})]
