"""Real nodes over SSH: the hosts of an Ansible inventory (``--cluster inventory``).

One module per job: ``hosts`` reads the inventory (Ansible's own parser) into ``Host``s,
``probe`` asks each host whether it can run the sweep, ``cluster`` is the
``InventoryCluster`` the sweep runs on (start over SSH, collect, clock offsets),
``straggler`` slows one of its nodes with cgroup v2, ``status`` is
``edgeprof cluster status --inventory``. This module holds the provider's settings only,
and imports the others when it needs them: the registry (``profiler.cluster``) imports
it, and so does every ``remote_exec`` on a node.

Host variables edgeprof reads (defaults as the Ansible roles install them):
``edgeprof_python`` (the venv's python), ``edgeprof_workdir``, ``edgeprof_data_dir``
(replaces ``--data-dir`` on that host), ``edgeprof_interface`` (the NIC that carries
training traffic, for Gloo and the agent), ``edgeprof_profile`` (a label for results: the
``node_profiles`` column).

A straggler (``--straggler``, ``slow_node``) needs cgroup v2 on the node: the cell's
processes there go into ``/sys/fs/cgroup/edgeprof-straggler/<cell>-<attempt>-<node>``
with ``cpu.max``, written as root (``sudo -n`` unless the SSH user is root); hosts without
cgroup v2's cpu controller are refused when the sweep checks them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ContextManager

from ...errors import ClusterError, ConfigError
from ..base import Cluster, ClusterSettings, GridNeeds, ProviderOption

# A sweep checks its hosts in preflight and again when it opens the cluster, moments
# apart: the second time reuses the first answers (each check imports the engines there).
CHECK_REUSE_S = 60.0


@dataclass
class InventorySettings(ClusterSettings):
    """``--cluster inventory --inventory FILE``: the hosts of that Ansible inventory."""

    inventory: Path | None = None
    # (when, hosts, engines, answers) of the last ``check``, which ``open`` reuses.
    _checked: tuple | None = field(default=None, init=False, repr=False, compare=False)

    name = "inventory"
    help = "real nodes over SSH, with --inventory"
    options = (ProviderOption(
        "inventory", parse=Path, identity=True, metavar="FILE",
        help="Ansible inventory of --cluster inventory: [master] and [workers] hosts "
             "(docs/cluster.md).",
        refusal="--inventory FILE goes with --cluster inventory (and only with it): give "
                "both, e.g. --cluster inventory --inventory inventory.ini"),)
    speed = "board"
    own_install = True

    def __post_init__(self) -> None:
        if self.inventory is None:
            raise ConfigError(self.options[0].refusal)
        self.inventory = Path(self.inventory)

    @classmethod
    def cluster_type(cls) -> type[Cluster]:
        from .cluster import InventoryCluster
        return InventoryCluster

    @property
    def label(self) -> str:
        return f"inventory cluster ({self.inventory})"

    def status(self) -> list[dict]:
        from .status import status
        return status(self.inventory)

    def status_lines(self, info) -> list[str]:
        from .status import lines
        return lines(info)

    def check(self, needs: GridNeeds) -> None:
        """Read the inventory and probe every host for the grid, keeping the answers."""
        self._hosts_checked(needs)

    def open(self, needs: GridNeeds) -> ContextManager[Cluster]:
        from .cluster import InventoryCluster
        return self.closing(InventoryCluster(self._hosts_checked(needs)))

    def _hosts_checked(self, needs: GridNeeds) -> list:
        from .hosts import read_inventory
        from .probe import check_hosts

        hosts = read_inventory(self.inventory)
        if len(hosts) < needs.nodes:
            raise ClusterError(f"--inventory {self.inventory} lists {len(hosts)} nodes, the "
                               f"grid needs {needs.nodes} (devices + 1 with --placement "
                               "master): add hosts or use fewer --devices")
        engines = tuple(sorted(needs.engines))
        reuse = None
        if self._checked is not None:
            when, checked_hosts, checked_engines, answers = self._checked
            if (checked_hosts, checked_engines) == (hosts, engines) and \
                    time.monotonic() - when <= CHECK_REUSE_S:
                reuse = answers
        answers = check_hosts(hosts, needs, reuse)
        if reuse is None:
            self._checked = (time.monotonic(), hosts, engines, answers)
        return hosts
