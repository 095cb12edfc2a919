"""``cpu_freq``: the CPU's current clock (a throttled Pi runs slower).

Where the kernel has cpufreq (a Pi does), each policy's ``scaling_cur_freq`` is read
directly, one small sysfs file per policy, as collectd's cpufreq plugin does:
``psutil.cpu_freq()`` also parses /proc/cpuinfo and reads every policy's min and max,
three times the reads for the one number kept here. Without cpufreq in sysfs (most VMs)
psutil's /proc/cpuinfo reading is the fallback, every ``CPUINFO_EVERY_S`` (the last
reading is repeated in between): /proc/cpuinfo lists every field of every core, the
dearest read of a tick, for a clock that no cpufreq driver of this kernel changes.
The policies are looked for under ``$EDGEPROF_SYSFS_ROOT`` when it is set
(``base.system_path``); the fallback is psutil's, the host's.
"""

from __future__ import annotations

import glob

import psutil

from .base import Collector, Field, Periodic, Sample, Unavailable, system_path

POLICY_GLOB = "/sys/devices/system/cpu/cpufreq/policy[0-9]*/scaling_cur_freq"


class CpuFreq(Collector):
    FIELDS = (Field("cpu_freq", "freq_mhz", "MHz", "current CPU frequency, mean over cores"),)
    CPUINFO_EVERY_S = 10.0

    def __init__(self, policy_files: list[str] | None = None):
        self.files = (sorted(glob.glob(str(system_path(POLICY_GLOB)))) if policy_files is None
                      else policy_files)
        if not self.files:
            mhz = _cpuinfo_mhz()
            if mhz is None:
                raise Unavailable("CPU frequency (no cpufreq in /sys or /proc/cpuinfo)")
            self._cpuinfo = Periodic(self.CPUINFO_EVERY_S, _cpuinfo_mhz, first=mhz)

    def collect(self) -> list[Sample]:
        if self.files:
            khz = []
            for path in self.files:
                with open(path, "rb") as f:
                    khz.append(int(f.read()))
            return [("cpu_freq", {}, {"freq_mhz": sum(khz) / len(khz) / 1000.0})]
        mhz = self._cpuinfo()
        return [] if mhz is None else [("cpu_freq", {}, {"freq_mhz": mhz})]


def _cpuinfo_mhz() -> float | None:
    freq = psutil.cpu_freq() if hasattr(psutil, "cpu_freq") else None
    return float(freq.current) if freq else None
