"""Node providers by name: ``local`` (default), ``emulated`` (root), ``inventory`` (SSH)."""

from __future__ import annotations

from ..errors import ConfigError
from .base import Cluster, Node

CLUSTERS = ("local", "emulated", "inventory")


def open_cluster(name: str, nodes_needed: int, profile: str | None = None, *,
                 inventory=None, cells=()) -> tuple[Cluster, bool]:
    """A cluster with at least ``nodes_needed`` nodes, and whether this call created it.

    The sweep takes down (``close`` + ``teardown``) only what it brought up itself.
    ``inventory`` (a path) is the Ansible inventory of the ``inventory`` cluster, whose
    hosts are checked (reachable, same edgeprof, able to run ``cells``) here.
    """
    if name == "local":
        from .local import LocalCluster
        return LocalCluster(nodes_needed), False
    if name == "emulated":
        from .emulated import ensure_cluster
        return ensure_cluster(nodes_needed, profile)
    if name == "inventory":
        if inventory is None:
            raise ConfigError("--cluster inventory needs --inventory FILE (an Ansible "
                              "inventory with [master] and [workers]; see docs/cluster.md)")
        from .inventory import open_inventory
        return open_inventory(inventory, nodes_needed, cells), False
    raise ConfigError(f"unknown cluster {name!r}: use one of {', '.join(CLUSTERS)}")


def check_speedup(name: str, speedup: float) -> None:
    """Refuse a ``--speedup`` (time dilation, the emulated cluster's) that cannot apply."""
    from .profiles import MAX_SPEEDUP
    if not 1 <= speedup <= MAX_SPEEDUP:
        raise ConfigError(f"--speedup {speedup:g}: give a factor from 1 (the profile's own "
                          f"speed) to {MAX_SPEEDUP:g}")
    if speedup != 1 and name != "emulated":
        raise ConfigError(f"--speedup {speedup:g} applies to the emulated cluster only (real "
                          f"and local nodes run at their own speed): drop it or use "
                          "--cluster emulated")


# Providers that can slow one node of a cell (``slow_node``/``restore_node``):
# ``--straggler`` is refused on the others before anything runs.
STRAGGLER_CLUSTERS = ("emulated", "inventory")


def check_straggler(name: str, cells) -> None:
    """Refuse a ``--straggler`` on a cluster whose nodes have no CPU of their own to slow
    (real nodes are checked for cgroup v2 with their hosts, ``inventory.check_hosts``)."""
    slowed = sorted({c.straggler for c in cells if c.straggler != "none"})
    if slowed and name not in STRAGGLER_CLUSTERS:
        raise ConfigError(f"--straggler {','.join(slowed)} slows one node's CPU, and the "
                          f"{name} cluster's nodes share this host's: use --cluster emulated "
                          "(or real nodes with cgroup v2: --cluster inventory), or drop "
                          "--straggler")


def teardown(name: str) -> None:
    """Take down a cluster that ``open_cluster`` created (nothing to do for ``local``)."""
    if name == "emulated":
        from .emulated import down
        down()


__all__ = ["Cluster", "Node", "open_cluster", "CLUSTERS"]
