"""``agent``: the agent's own footprint, so that its cost is visible beside what it measures."""

from __future__ import annotations

import time

import psutil

from .base import MB, Collector, Field, Sample


class AgentSelf(Collector):
    FIELDS = (Field("agent", "rss_mb", "MB", "the agent's resident memory"),
              Field("agent", "cpu_s", "s", "CPU seconds the agent has used (user + system)"),
              Field("agent", "points_written", "points", "points written to the spool (int)"),
              Field("agent", "points_dropped", "points",
                    "points dropped: disk full, or deleted by the spool's size bound (int)"))

    @classmethod
    def create(cls, config, spool):
        return cls(spool)

    def __init__(self, spool=None):
        self.spool = spool
        self._self = psutil.Process()

    def collect(self) -> list[Sample]:
        # process_time() is a clock_gettime call, where psutil's cpu_times() parses
        # /proc/self/stat: measuring itself was a fifth of the agent's tick.
        fields: dict[str, float | int | bool] = {
            "rss_mb": self._self.memory_info().rss / MB, "cpu_s": time.process_time()}
        if self.spool is not None:
            fields["points_written"] = self.spool.points_written
            fields["points_dropped"] = self.spool.points_dropped
        return [("agent", {}, fields)]
