"""``mem`` of a node's cell run as containers (``--containers``): the memory of the
cell's containers on the node, summed, against the node's limit (``--memory-mb``).

``used_mb`` is each live container's usage less its inactive page cache (as ``docker
stats`` counts it), summed; ``peak_mb`` the sum of each container's own high-water mark
(``memory.max_usage_in_bytes``, v2 ``memory.peak``), an ended one's kept: an upper bound
of their simultaneous peak, from their start (each container is made after the agent
started, so its mark is the cell's). Where the kernel has no mark (v2 before 5.19) the
field is left out.
"""

from __future__ import annotations

import psutil

from .base import MB, Collector, Sample
from .cgroup_memory import CgroupMemory, used_bytes


class ContainerMemory(Collector):
    FIELDS = CgroupMemory.FIELDS

    @classmethod
    def create(cls, config, spool):
        if config.containers is None:
            return None
        return cls(config.container_set(), config.memory_mb)

    def __init__(self, containers, limit_mb: float | None):
        self.containers = containers
        self.limit_mb = limit_mb or psutil.virtual_memory().total / MB
        self._peaks: dict[str, int] = {}

    def collect(self) -> list[Sample]:
        used = 0
        for container in self.containers.refresh():
            path = container.memory_dir
            if path is None:
                continue
            v2 = (path / "memory.current").exists()
            try:
                used += used_bytes(path, v2)
            except (OSError, ValueError):
                continue  # ended: it holds nothing now
            try:
                name = "memory.peak" if v2 else "memory.max_usage_in_bytes"
                self._peaks[container.key] = int((path / name).read_text())
            except (OSError, ValueError):
                pass
        used_mb = used / MB
        fields: dict[str, float | int | bool] = {
            "used_mb": used_mb, "available_mb": max(0.0, self.limit_mb - used_mb),
            "total_mb": self.limit_mb, "used_percent": 100.0 * used_mb / self.limit_mb}
        if self._peaks:
            fields["peak_mb"] = sum(self._peaks.values()) / MB
        return [("mem", {}, fields)]
