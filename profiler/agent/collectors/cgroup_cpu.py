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
        if not config.cgroup_cpu or config.containers is not None:
            return None
        return cls(config.cgroup_cpu, config.cpu_cores, config.board_cores)

    def __init__(self, cgroup_dir: str, quota_cores: float | None,
                 board_cores: int | None = None):
        self.path = Path(cgroup_dir)
        self.v2 = is_v2(self.path)
        if not self.v2 and not (self.path / "cpuacct.usage").exists():
            raise Unavailable(f"cgroup CPU accounting in {cgroup_dir}")
        self._start(quota_cores, board_cores)

    def _start(self, quota_cores: float | None, board_cores: int | None) -> None:
        self.quota_cores = quota_cores or float(psutil.cpu_count() or 1)
        # The % is of the node's whole compute, as Ganglia's is of a board's four cores:
        # the core count says what one busy core of the board would show (25% on a Pi 3B).
        self.board = {"cores": int(board_cores)} if board_cores else {}
        self._last = (time.monotonic(), self._usage_s())

    def _usage_s(self) -> tuple[float, float, float]:
        """(total, user, system) CPU seconds used by the cgroup so far."""
        return usage_s(self.path, self.v2)

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


def is_v2(cgroup_dir: Path) -> bool:
    """Whether ``cgroup_dir`` accounts CPU as cgroup v2 does (``cpu.stat``, no cpuacct)."""
    return (cgroup_dir / "cpu.stat").exists() and not (cgroup_dir / "cpuacct.usage").exists()


def usage_s(cgroup_dir: Path, v2: bool) -> tuple[float, float, float]:
    """(total, user, system) CPU seconds the cgroup has used so far; ``OSError`` or
    ``KeyError`` once it is gone."""
    if v2:
        stat = read_keyed(cgroup_dir / "cpu.stat")
        return (stat["usage_usec"] / 1e6, stat.get("user_usec", 0) / 1e6,
                stat.get("system_usec", 0) / 1e6)
    total_s = int((cgroup_dir / "cpuacct.usage").read_text()) / 1e9
    stat = read_keyed(cgroup_dir / "cpuacct.stat")  # in USER_HZ ticks
    return total_s, stat.get("user", 0) / _TICKS_PER_S, stat.get("system", 0) / _TICKS_PER_S


_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
