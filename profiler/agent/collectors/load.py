"""``load``: the kernel's run-queue averages."""

from __future__ import annotations

import os

from .base import Collector, Field, Sample


class Load(Collector):
    FIELDS = tuple(Field("load", f"load{minutes}", "tasks",
                         f"run-queue length averaged over {minutes} min")
                   for minutes in (1, 5, 15))

    def collect(self) -> list[Sample]:
        load1, load5, load15 = os.getloadavg()
        return [("load", {}, {"load1": load1, "load5": load5, "load15": load15})]
