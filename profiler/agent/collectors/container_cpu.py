"""``cpu`` of a node's cell run as containers (``--containers``): the CPU time of the
cell's containers on the node, summed, as % of the node's quota (``--cpu-cores``).

Each container's own cgroup (``cpuacct.usage``, v2 ``cpu.stat``) counts from 0 when it
is made, after the agent started: the sum is the node's training CPU time since then,
the counter (``busy_s``) the cell's summary reads. A container that ended keeps its
last reading in the sum, so that the counter never goes back.
"""

from __future__ import annotations

from .cgroup_cpu import CgroupCpu, is_v2, usage_s


class ContainerCpu(CgroupCpu):
    """The cell's containers' CPU on this node, written as a cgroup node's ``cpu``."""

    @classmethod
    def create(cls, config, spool):
        if config.containers is None:
            return None
        return cls(config.container_set(), config.cpu_cores, config.board_cores)

    def __init__(self, containers, quota_cores: float | None, board_cores: int | None = None):
        self.containers = containers
        self._usage: dict[str, tuple[float, float, float]] = {}
        self._v2: dict[str, bool] = {}
        self._start(quota_cores, board_cores)

    def _usage_s(self) -> tuple[float, float, float]:
        for container in self.containers.refresh():
            path = container.cpu_dir
            if path is None:
                continue
            if container.key not in self._v2:
                self._v2[container.key] = is_v2(path)
            try:
                self._usage[container.key] = usage_s(path, self._v2[container.key])
            except (OSError, KeyError, ValueError):
                pass  # ended, its cgroup removed: its last reading stands
        return tuple(sum((u[i] for u in self._usage.values()), 0.0) for i in range(3))
