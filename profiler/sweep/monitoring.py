"""Starts the metrics agent beside a cell's processes, one per node, and summarizes it.

The agent runs on each node (inside an emulated node's network namespace) but outside
the node's CPU and memory limits (``confine=False``), so its own footprint is not charged
to training. The runner tells it which pids belong to which role through
``pids/<node>.json``, written atomically. The summary's energy needs each node's power
model (its profile's) and whether its meters are its own (``node_power``).
"""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

from ..cell import CellConfig
from ..cluster.base import Cluster, Node, kill_groups
from ..fsutil import atomic_write_text
from .interrupts import StopRequest

AGENT_STOP_GRACE_S = 3.0


class CellMonitor:
    """The agents of one cell: ``start`` before training, ``stop`` after, then ``summary``."""

    def __init__(self, cluster: Cluster, cell_dir: Path, cell: CellConfig, sweep_id: str,
                 interval_s: float, *, traffic_file: Path | None = None):
        self.cluster = cluster
        self.cell_dir = cell_dir
        self.cell = cell
        self.sweep_id = sweep_id
        self.interval_s = interval_s
        self.traffic_file = traffic_file  # the live shipper's, to take out of loopback
        self._agents: list[subprocess.Popen] = []
        self._nodes: list[Node] = []

    def pids_file(self, node: Node) -> Path:
        return self.cell_dir / "pids" / f"{node.name}.json"

    def start(self, nodes: list[Node], stop: StopRequest | None = None) -> None:
        from ..metrics.launch import agent_argv

        (self.cell_dir / "pids").mkdir(parents=True, exist_ok=True)
        self._nodes = list(nodes)
        for node in nodes:
            if stop is not None and stop.requested:
                return
            tags = {"sweep": self.sweep_id, "cell": self.cell.cell_id, "node": node.name,
                    "host": socket.gethostname(), **self.cell.tags()}
            write_pids(self.pids_file(node), {})
            argv = agent_argv(node, self.cell_dir / "metrics" / node.name,
                              self.pids_file(node), tags, self.interval_s)
            self._agents.append(self.cluster.start(
                node, argv, {}, self.cell_dir / "logs" / f"agent-{node.name}.log",
                confine=False))

    def track(self, pids_by_node: dict[str, dict[str, list[int]]], nodes: list[Node]) -> None:
        for node in nodes:
            write_pids(self.pids_file(node), pids_by_node.get(node.name, {}))

    def stop(self, stop: StopRequest | None = None) -> None:
        """SIGTERM every agent (each takes a last sample and closes its spool), then kill."""
        kill_groups(self._agents, grace_s=AGENT_STOP_GRACE_S,
                    hurry=lambda: stop is not None and stop.hurry)
        self._agents.clear()

    def summary(self, worker_nodes: list[str], t_start: float, t_end: float,
                work=None, worker_maxrss_mb: dict[str, float] | None = None) -> dict:
        """The cell's summary columns; ``work``: its ``energy.CellWork`` (samples,
        accuracy time, dilation) for the energy per sample and to accuracy;
        ``worker_maxrss_mb``: the peak RSS each node's workers reported."""
        from ..metrics.summary import summarize_cell
        return summarize_cell(self.cell_dir, worker_nodes, t_start, t_end,
                              traffic_file=self.traffic_file,
                              power=node_power(self._nodes), work=work,
                              worker_maxrss_mb=worker_maxrss_mb)


def node_power(nodes: list[Node]) -> dict:
    """``{node: energy.NodePower}``: its profile's power model (None for a local slot or
    a profile without one), whether the meters its agent reads are its own (not on an
    emulated node: a network namespace of a host that is not its board, nor a Swarm
    task under a profile's quota: ``NodeScope.own_meters``), and the
    machine they are on: the SSH host, else the address (the local cluster's slots all
    127.0.0.1, one host). Not the agents' ``host`` tag, which is the controller's."""
    from ..cluster.profiles import load_catalog
    from ..metrics.energy import NodePower

    profiles = load_catalog().profiles if any(n.profile != "host" for n in nodes) else {}
    return {node.name: NodePower(model=getattr(profiles.get(node.profile), "power", None),
                                 own_meters=node.scope.netns is None
                                 and node.scope.own_meters,
                                 host=node.scope.ssh_host or node.address)
            for node in nodes}


def write_pids(path: Path, pids_by_role: dict[str, list[int]]) -> None:
    atomic_write_text(path, json.dumps(pids_by_role))
