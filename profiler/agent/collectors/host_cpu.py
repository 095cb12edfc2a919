"""``cpu`` and ``cpu_core``: the host's CPU time shares, in total and per core."""

from __future__ import annotations

import psutil

from .base import Collector, Field, Sample

SHARES = ("cpu_percent", "user_percent", "system_percent", "iowait_percent")
_MEANING = {"cpu_percent": "busy (100 - idle - iowait)", "user_percent": "in user mode",
            "system_percent": "in the kernel", "iowait_percent": "idle waiting for IO"}
CPU_FIELDS = tuple(
    Field("cpu", name, "%", f"share of all cores' time {_MEANING[name]}; on a cgroup "
                            "node, of the node's quota (quota_cores)")
    for name in SHARES) + (
    Field("cpu", "cores", "count", "logical cores counted (int): the host's; on a cgroup "
                                   "node the board's its profile names"),
    Field("cpu", "busy_s", "s", "CPU seconds used so far, a counter: all cores' busy time "
                                "(user, nice, system, irq, softirq, steal); on a cgroup node "
                                "the cgroup's (cpuacct.usage, v2 cpu.stat usage_usec)"),)
_BUSY = ("user", "nice", "system", "irq", "softirq", "steal")


class HostCpu(Collector):
    """One /proc/stat read a tick gives every core's shares; the total is their mean."""

    FIELDS = CPU_FIELDS + tuple(
        Field("cpu_core", name, "%", f"share of that core's time {_MEANING[name]}")
        for name in SHARES)
    TAGS = {"core": "cpu_core: the core's index"}

    @classmethod
    def create(cls, config, spool):
        # A cgroup node's total comes from its cgroup (CgroupCpu), a node's containers'
        # from theirs (ContainerCpu); its cores stay the host's.
        return cls(include_total=not (config.cgroup_cpu or config.containers))

    def __init__(self, include_total: bool = True):
        self.include_total = include_total
        psutil.cpu_times_percent(percpu=True)

    def collect(self) -> list[Sample]:
        per_core = psutil.cpu_times_percent(percpu=True)
        samples: list[Sample] = []
        totals = dict.fromkeys(SHARES, 0.0)
        for core, times in enumerate(per_core):
            iowait = float(getattr(times, "iowait", 0.0))
            fields = {"cpu_percent": max(0.0, 100.0 - times.idle - iowait),
                      "user_percent": float(times.user), "system_percent": float(times.system),
                      "iowait_percent": iowait}
            samples.append(("cpu_core", {"core": str(core)}, fields))
            for name, value in fields.items():
                totals[name] += value / len(per_core)
        if self.include_total:
            times = psutil.cpu_times()
            busy_s = sum(getattr(times, name, 0.0) for name in _BUSY)
            samples.append(("cpu", {}, {**totals, "cores": len(per_core), "busy_s": busy_s}))
        return samples
