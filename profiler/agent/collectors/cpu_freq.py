"""``cpu_freq``: the CPU's current clock (a throttled Pi runs slower)."""

from __future__ import annotations

import psutil

from .base import Collector, Field, Sample, Unavailable


class CpuFreq(Collector):
    FIELDS = (Field("cpu_freq", "freq_mhz", "MHz", "current CPU frequency, mean over cores"),)

    def __init__(self):
        if not hasattr(psutil, "cpu_freq") or not psutil.cpu_freq():
            raise Unavailable("CPU frequency (no cpufreq in /sys or /proc/cpuinfo)")

    def collect(self) -> list[Sample]:
        freq = psutil.cpu_freq()
        return [("cpu_freq", {}, {"freq_mhz": float(freq.current)})] if freq else []
