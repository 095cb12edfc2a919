"""Emulated boards on Swarm hosts: an emulated cluster that outgrows one machine.

A Swarm node labelled ``edgeprof.boards=N`` is not a board but a host of N emulated
boards of its ``edgeprof.profile``: ``expand`` turns it into N nodes ``<host>-b0`` ..
``<host>-b<N-1>``, all pinned to that Swarm node. A task on an emulated board runs under
the board profile's CPU quota and memory limit (the service's resources, whatever
``--swarm-limits`` says: a board without its limits is not an emulated board), and its
container shapes its own link: ``tbf`` at the profile's ``link_mbit`` on the egress of
its ``eth0`` (the overlay), set by the task's first command, which needs ``NET_ADMIN``
(granted to these services only) and ``tc`` (iproute2) in the image. So one sweep spreads
twenty or fifty boards over the machines of a Swarm, each machine holding as many boards
as its cores hold quotas.

What this is not (docs/swarm.md, "An emulated cluster over several hosts"): a board is a
container per process, not a cgroup per board, so a board running two processes (a
worker and a colocated server) gets two quotas and two links; only the upload is shaped
(tbf shapes what leaves a device: the download is the other boards' uploads); the quota
has Docker's 100 ms CFS period (services set NanoCPUs only), not the emulated cluster's
~1.4 ms, so a board gets its share in bursts; and the quotas are the profile's as
calibrated on the host where it was calibrated, undilated.
"""

from __future__ import annotations

import shlex
from typing import Sequence

from ...errors import ConfigError
from ..netns import tbf_argv, tbf_rate_mbit

BOARDS_LABEL = "edgeprof.boards"
MAX_BOARDS_PER_HOST = 250
OVERLAY_IFACE = "eth0"
# The exit status of a task whose link could not be shaped (Docker's for "did not run").
NOT_SHAPED_STATUS = 125


def board_count(labels: dict, node_name: str, node_id: str) -> int:
    """How many emulated boards the Swarm node hosts: 0 when it is a board itself (no
    ``edgeprof.boards`` label); a bad value is refused in one line."""
    text = labels.get(BOARDS_LABEL)
    if text is None:
        return 0
    try:
        count = int(text)
    except ValueError:
        count = 0
    if not 1 <= count <= MAX_BOARDS_PER_HOST:
        raise ConfigError(f"Swarm node {node_name} ({node_id[:12]}) has {BOARDS_LABEL}={text}: "
                          f"give the number of emulated boards it hosts, 1 to "
                          f"{MAX_BOARDS_PER_HOST} (`docker node update --label-add "
                          f"{BOARDS_LABEL}=4 {node_id[:12]}`), or remove the label for a "
                          "real board")
    return count


def board_names(host: str, count: int) -> list[str]:
    return [f"{host}-b{i}" for i in range(count)]


def shaped_command(command: Sequence[str], link_mbit: float, mtu: int) -> list[str]:
    """``command`` (``sh -c SCRIPT LOG ARGV...``, the task's) with the link shaped first,
    for the overlay's frames of ``mtu`` bytes (the bucket holds two of them; the rate
    gives TCP's payload a 1500-byte Ethernet's pace, as the emulated links do:
    ``netns.tbf_rate_mbit``); a task whose link cannot be shaped (no
    ``tc`` in the image, no ``NET_ADMIN``) ends with ``NOT_SHAPED_STATUS``, its reason
    in the log, before the trainer starts."""
    shell, flag, script, *rest = command
    tc = shlex.join(tbf_argv(OVERLAY_IFACE, tbf_rate_mbit(link_mbit, mtu), mtu=mtu))
    shape = (f'{tc} >>"$0" 2>&1 || {{ echo "edgeprof swarm: cannot shape the emulated '
             f'board\'s link ({link_mbit:g} Mbit): the image needs tc (iproute2) and the '
             f'task NET_ADMIN" >>"$0"; exit {NOT_SHAPED_STATUS}; }}; ')
    return [shell, flag, shape + script, *rest]
