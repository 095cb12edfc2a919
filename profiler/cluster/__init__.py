"""Node providers by name: ``local`` (default), ``emulated`` (root), ``inventory`` (later)."""

from __future__ import annotations

from ..errors import ConfigError
from .base import Cluster, Node

CLUSTERS = ("local", "emulated")


def open_cluster(name: str, nodes_needed: int,
                 profile: str | None = None) -> tuple[Cluster, bool]:
    """A cluster with at least ``nodes_needed`` nodes, and whether this call created it.

    The sweep takes down (``close`` + ``teardown``) only what it brought up itself.
    """
    if name == "local":
        from .local import LocalCluster
        return LocalCluster(nodes_needed), False
    if name == "emulated":
        from .emulated import ensure_cluster
        return ensure_cluster(nodes_needed, profile)
    raise ConfigError(f"unknown cluster {name!r}: use one of {', '.join(CLUSTERS)}")


def teardown(name: str) -> None:
    """Take down a cluster that ``open_cluster`` created (nothing to do for ``local``)."""
    if name == "emulated":
        from .emulated import down
        down()


__all__ = ["Cluster", "Node", "open_cluster", "CLUSTERS"]
