"""``net`` of a node's cell run as containers (``--containers``): each container's own
network namespace, its interfaces (``--interfaces``, else all but ``lo``) summed by name.

A container's counters are read from ``<proc-root>/<pid>/net/dev`` (the namespace of its
first process) and count from 0 when its namespace is made, after the agent started, so
the sum is the cell's traffic on this node; an ended container keeps its last reading
in the sum, so that the counters never go back. On Swarm the interface is the task's
overlay, ``eth0``: the training traffic itself, before VXLAN wraps it.
"""

from __future__ import annotations

from pathlib import Path

from .base import Collector, Deltas, Sample
from .network import Network

# In the order the node-level collector writes them (network.py).
_COUNTERS = ("sent_bytes", "recv_bytes", "sent_packets", "recv_packets")


class ContainerNetwork(Collector):
    FIELDS = Network.FIELDS
    TAGS = Network.TAGS

    @classmethod
    def create(cls, config, spool):
        if config.containers is None:
            return None
        return cls(config.container_set(), config.interfaces, config.proc_root)

    def __init__(self, containers, interfaces: list[str] | None, proc_root: str = "/proc"):
        self.containers = containers
        self.interfaces = [name for name in (interfaces or []) if name]
        self.proc_root = Path(proc_root)
        # container key -> interface -> its last counters
        self._last: dict[str, dict[str, dict[str, int]]] = {}
        self._deltas = Deltas()

    def collect(self) -> list[Sample]:
        for container in self.containers.refresh():
            try:
                counters = read_net_dev(self.proc_root / str(container.pid) / "net" / "dev")
            except OSError:
                continue  # ended: its last reading stands
            self._last[container.key] = {
                name: values for name, values in counters.items()
                if (name in self.interfaces if self.interfaces else name != "lo")}
        # The interfaces asked for are written from the first tick (zeros before any
        # container runs), so the cell's window is bracketed by samples.
        totals = {name: dict.fromkeys(_COUNTERS, 0) for name in self.interfaces}
        for by_name in self._last.values():
            for name, values in by_name.items():
                total = totals.setdefault(name, dict.fromkeys(_COUNTERS, 0))
                for key in _COUNTERS:
                    total[key] += values[key]
        return [("net", {"interface": name}, self._deltas.fields(name, total))
                for name, total in sorted(totals.items())]


def read_net_dev(path: Path) -> dict[str, dict[str, int]]:
    """``/proc/<pid>/net/dev``: bytes and packets received and sent, by interface."""
    counters = {}
    with open(path) as handle:
        lines = handle.read().splitlines()[2:]  # two header lines
    for line in lines:
        name, _, rest = line.partition(":")
        values = rest.split()
        if len(values) >= 10:
            counters[name.strip()] = {
                "recv_bytes": int(values[0]), "recv_packets": int(values[1]),
                "sent_bytes": int(values[8]), "sent_packets": int(values[9])}
    return counters
