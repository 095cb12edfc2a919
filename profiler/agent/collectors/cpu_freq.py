"""``cpu_freq``: the CPU's current clock (a throttled Pi runs slower).

Where the kernel has cpufreq (a Pi does), each policy's ``scaling_cur_freq`` is read
directly, one small sysfs file per policy, as collectd's cpufreq plugin does:
``psutil.cpu_freq()`` also parses /proc/cpuinfo and reads every policy's min and max,
three times the reads for the one number kept here. Without cpufreq in sysfs (most VMs)
psutil's /proc/cpuinfo reading is the fallback.
"""

from __future__ import annotations

import glob

import psutil

from .base import Collector, Field, Sample, Unavailable

POLICY_GLOB = "/sys/devices/system/cpu/cpufreq/policy[0-9]*/scaling_cur_freq"


class CpuFreq(Collector):
    FIELDS = (Field("cpu_freq", "freq_mhz", "MHz", "current CPU frequency, mean over cores"),)

    def __init__(self, policy_files: list[str] | None = None):
        self.files = sorted(glob.glob(POLICY_GLOB)) if policy_files is None else policy_files
        if not self.files and (not hasattr(psutil, "cpu_freq") or not psutil.cpu_freq()):
            raise Unavailable("CPU frequency (no cpufreq in /sys or /proc/cpuinfo)")

    def collect(self) -> list[Sample]:
        if self.files:
            khz = []
            for path in self.files:
                with open(path, "rb") as f:
                    khz.append(int(f.read()))
            return [("cpu_freq", {}, {"freq_mhz": sum(khz) / len(khz) / 1000.0})]
        freq = psutil.cpu_freq()
        return [("cpu_freq", {}, {"freq_mhz": float(freq.current)})] if freq else []
