"""The default cluster: plain processes on this machine, no root needed.

Every node is a slot on loopback. Nodes share the host's CPU, memory and network, so
node-level metrics on this cluster are the host's (per-process metrics stay per role).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import ContextManager, Mapping, Sequence

from .base import (Cluster, ClusterSettings, GridNeeds, Node, NodeEntry, NodeScope,
                   popen_in_group)


class LocalCluster(Cluster):
    """``count`` local slots named ``local0`` … ``localN``."""

    name = "local"

    def __init__(self, count: int = 1):
        self._count = max(1, count)

    def nodes(self) -> list[Node]:
        return [Node(name=f"local{i}", address="127.0.0.1", profile="host",
                     scope=NodeScope(interfaces=("lo",))) for i in range(self._count)]

    def start(self, node: Node, argv: Sequence[str], env: Mapping[str, str],
              log_path: Path, *, confine: bool = True,
              role: str | None = None) -> subprocess.Popen:
        return popen_in_group(argv, env, log_path)

    def entry(self, node: Node, *, role: str | None = None, origin: Node | None = None,
              cell_dir: Path | None = None) -> NodeEntry:
        return NodeEntry()  # every slot is this host: run the command as it is


@dataclass
class LocalSettings(ClusterSettings):
    """``--cluster local``: takes none of the provider options."""

    name = "local"
    help = "processes here"

    @classmethod
    def cluster_type(cls) -> type[Cluster]:
        return LocalCluster

    def open(self, needs: GridNeeds) -> ContextManager[Cluster]:
        return self.closing(LocalCluster(needs.nodes))
