"""The sampling loop: every ``interval_s``, all collectors → one spool write.

One collector failing (any exception) skips it for that tick, with one WARNING; the
spool handles a full disk by dropping ticks (see ``spool``): the agent never dies of
one bad sample.

The loop waits on an ``Event`` (``stop()`` wakes it at once) against a monotonic
schedule, so ticks do not drift by the time sampling takes. All points of a tick share
one wall-clock timestamp (ms), and each tick's is later than the last one's: the last
sample on stop can follow a tick within the millisecond (a tick takes 0.5-1 ms here),
and a series holds one point per timestamp, so InfluxDB would keep only one of the two
(a CI run lost one tick so). Node-level points are tagged with the roles present on
the node (``role="worker"``, ``"scheduler+server"``; ``"none"`` before the cell's
processes start); process points carry their own role.
"""

from __future__ import annotations

import gc
import logging
import socket
import threading
import time
from dataclasses import dataclass, field

from pathlib import Path

from . import collectors
from . import lineproto
from .spool import SEGMENT_MAX_BYTES, SPOOL_MAX_BYTES, SpoolWriter

log = logging.getLogger(__name__)

MIN_INTERVAL_S = 0.1
MAX_INTERVAL_S = 3600.0


@dataclass
class AgentConfig:
    """Everything one agent needs, built by ``edgeprof agent`` from its options (the
    sweep starts agents through that command: ``metrics.launch.agent_argv``)."""

    node: str
    spool_dir: Path
    interval_s: float = 1.0
    tags: dict[str, str] = field(default_factory=dict)
    pids_file: Path | None = None
    interfaces: list[str] = field(default_factory=list)  # empty: all but loopback
    cgroup_cpu: str | None = None
    cgroup_memory: str | None = None
    cpu_cores: float | None = None
    board_cores: int | None = None  # cores of the board an emulated node stands for
    memory_mb: float | None = None
    segment_max_bytes: int = SEGMENT_MAX_BYTES
    spool_max_bytes: int = SPOOL_MAX_BYTES
    # The cell's containers on this node (``containers``: the folder naming them), read
    # through the node's /proc and cgroup tree as mounted here: sampled instead of the
    # node's own CPU, memory, network and pids (an agent in a container, on Swarm).
    containers: Path | None = None
    proc_root: str = "/proc"
    cgroup_root: str = "/sys/fs/cgroup"
    _container_set: object = field(default=None, init=False, repr=False, compare=False)

    def container_set(self):
        """The ``ContainerSet`` the container collectors share (one per agent)."""
        if self._container_set is None:
            from .containers import ContainerSet
            self._container_set = ContainerSet(self.containers, self.proc_root,
                                               self.cgroup_root)
        return self._container_set

    def base_tags(self) -> dict[str, str]:
        tags = {"host": socket.gethostname(), **self.tags, "node": self.node}
        return {key: str(value) for key, value in tags.items() if str(value) != ""}


class Sampler:
    """Samples every ``interval_s`` into the node's spool until stopped."""

    def __init__(self, config: AgentConfig, stop: threading.Event | None = None):
        if not MIN_INTERVAL_S <= config.interval_s <= MAX_INTERVAL_S:
            from ..errors import ConfigError
            raise ConfigError(f"--interval {config.interval_s} is out of range: use "
                              f"{MIN_INTERVAL_S} to {MAX_INTERVAL_S:.0f} seconds")
        self.config = config
        self.spool = SpoolWriter(config.spool_dir, config.base_tags(),
                                 segment_max_bytes=config.segment_max_bytes,
                                 max_bytes=config.spool_max_bytes)
        self.collectors = collectors.build(config, self.spool)
        # Node-level points carry the roles of the pids file the Processes collector reads.
        self.processes = next((x for x in self.collectors
                               if isinstance(x, collectors.Processes)),
                              collectors.Processes(None))
        self.ticks = 0
        self._stop = stop or threading.Event()
        self._failed: set[str] = set()
        self._role = "none"
        self._last_ms = 0  # the last tick's timestamp: the next one is later (docstring)

    def tick(self) -> int:
        """Sample once; returns the number of points written.

        Never raises for one bad collector: any exception from a ``collect()`` (or from
        reading the roles) skips that collector for this tick, with one WARNING per
        collector for the agent's lifetime (a broken sensor would otherwise log every
        tick). The spool's own failures (disk full) are handled by ``SpoolWriter``.
        """
        time_ms = self._last_ms = max(int(time.time() * 1000), self._last_ms + 1)
        try:
            role = self._role = self.processes.role_tag()
        except Exception as exc:  # noqa: BLE001 - keep the last good roles, not lose the tick
            role = self._role
            self._warn_once("roles (--pids-file)", exc)
        lines = []
        for collector in self.collectors:
            try:
                lines.extend([
                    lineproto.encode(measurement,
                                     tags if "role" in tags else {**tags, "role": role},
                                     fields, time_ms)
                    for measurement, tags, fields in collector.collect()])
            except Exception as exc:  # noqa: BLE001 - one collector's failure, not the tick's
                self._warn_once(type(collector).__name__, exc)
        self.spool.append(lines)
        self.ticks += 1
        return len(lines)

    def _warn_once(self, name: str, exc: Exception) -> None:
        if name not in self._failed:  # say it once, not every tick
            self._failed.add(name)
            log.warning("collector %s failed, skipping it this tick (said once; it is "
                        "tried again every tick): %s: %s", name, type(exc).__name__, exc)

    def run(self) -> None:
        """Sample until ``stop()``; then close the spool (flushed and fsynced)."""
        next_s = time.monotonic()
        try:
            while not self._stop.is_set():
                self.tick()
                next_s += self.config.interval_s
                now = time.monotonic()
                if next_s < now:  # fell behind (suspended, overloaded): do not burst
                    next_s = now + self.config.interval_s
                self._stop.wait(next_s - now)
            # One last sample on stop, so that the counters bracket the end of a run
            # shorter than the interval (summaries interpolate between samples).
            self.tick()
        finally:
            self.spool.close()

    def stop(self) -> None:
        self._stop.set()


def run_agent(config: AgentConfig, shipper=None, stop: threading.Event | None = None
              ) -> Sampler:
    """Sample until ``stop`` is set (by a signal handler or another thread), shipping
    the node's spool live through ``shipper`` when given: a ``LiveShipper`` not yet
    started, which the command makes (this module never imports the shipper, so an
    agent that only spools never loads influxdb-client or requests)."""
    sampler = Sampler(config, stop)
    if shipper is not None:
        shipper.start()
        shipper.watch(config.spool_dir)
    # Everything loaded by now (modules, collectors) lives as long as the agent: frozen,
    # the garbage collector no longer walks it on every full pass of a long run.
    gc.freeze()
    try:
        sampler.run()
    finally:
        if shipper is not None:
            shipper.stop(timeout_s=5.0)
    return sampler
