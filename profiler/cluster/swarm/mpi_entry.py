"""How an MPI launcher on a Swarm node reaches the cell's other nodes: an entry there.

``mpirun`` runs in the launcher's container on node 0 and starts one ``orted`` per
other node through its rsh agent (``workloads.mpi rsh``), which must start it on that
node, under that node's limits and on the cell's overlay, and stay attached while it
runs (``orte_leave_session_attached``). A container cannot start a process in
another, and no node has a key to another, so for each other node of an MPI cell
``SwarmCluster.entry`` starts one more one-task service there, with a worker's image,
limits, overlay network (under the node's own name, the cell's first process there)
and mounts: ``workloads.mpi serve``, which listens on ``ENTRY_PORT`` of its overlay
address. The node's entry for the launcher is ``workloads.mpi via tcp:NODE:PORT
@TICKET_FILE NODE --``: the rsh agent connects, brings the ticket and the daemon's
argv, the entry runs ``workloads.mpi enter NODE -- orted ...`` as its child (so the
rank ``orted`` forks runs in that container, measured by the node's agent as a
worker's) and answers with its status; the connection is the lifeline both ways, as
the inventory's relay's is (``profiler.cluster.inventory.mpi_relay``): the ``via``
going stops the daemon, the daemon or its container ending ends the ``via`` with a
line naming the node, which the launcher's reason takes.

The ticket (random, one per node and cell) is in a mode-0600 file in the cell's folder,
which both containers see through the sweep's bind mount: never in a command line or
an environment, which the Swarm shows to whoever reads its services. The overlay is
the cell's own and internal, so only the cell's containers reach the port at all.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

from workloads.mpi import NODE_ENTRIES_ENV, TCP_PREFIX

from ..base import Node, NodeEntry

ENTRY_PORT = 7390  # the entry's own container: nothing else listens there


def write_ticket(cell_dir: Path, node: Node) -> Path:
    """A new ticket for ``node``'s entry in this cell, in a file only root reads."""
    path = cell_dir / "entries" / f"{node.name}.ticket"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(secrets.token_hex(16))
    return path


def entry_command(python: str, ticket_path: Path, node: Node,
                  cell_dir: Path) -> tuple[list[str], dict[str, str]]:
    """The entry service's argv and environment (``workloads.mpi serve``): the daemon's
    ``enter`` finds its node there as it is (the container is the node's context)."""
    entries = {"cell": str(cell_dir), "nodes": {node.name: NodeEntry().to_dict()}}
    return ([python, "-m", "workloads.mpi", "serve", str(ticket_path), str(ENTRY_PORT),
             node.name], {NODE_ENTRIES_ENV: json.dumps(entries)})


def via_prefix(python: str, alias: str, ticket_path: Path, node: Node) -> tuple[str, ...]:
    """What the launcher's rsh agent runs the daemon's argv after, for ``node``."""
    return (python, "-m", "workloads.mpi", "via", f"{TCP_PREFIX}{alias}:{ENTRY_PORT}",
            f"@{ticket_path}", node.name, "--")
