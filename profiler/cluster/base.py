"""The one small interface every node provider implements: list nodes, start, stop.

A *node* is one device: a local slot (``local``), a network namespace with its own
cgroup (``emulated``) or a real host reached over SSH (``inventory``). Engines never
know which: they get ``Node`` objects and call ``Cluster.start``.
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Protocol, Sequence


@dataclass(frozen=True)
class Node:
    """One device of a cluster.

    ``address`` is what other nodes use to reach it (``127.0.0.1`` for local slots, the
    namespace's IP for emulated nodes). ``cpu_cores`` and ``memory_mb`` are the node's
    limits when the provider enforces any (``None``: the host's).
    """

    name: str
    address: str = "127.0.0.1"
    profile: str = "host"
    cpu_cores: float | None = None
    memory_mb: int | None = None
    # Provider-specific facts the agent needs to scope itself to this node, e.g.
    # {"netns": "edgeprof-n1", "cgroup_memory": "/sys/fs/cgroup/memory/edgeprof/n1"}.
    scope: Mapping[str, str] = field(default_factory=dict)


class Cluster(Protocol):
    """A set of nodes on which processes can be started."""

    name: str

    def nodes(self) -> list[Node]:
        """All nodes, in a stable order (node 0 first)."""

    def start(
        self,
        node: Node,
        argv: Sequence[str],
        env: Mapping[str, str],
        log_path: Path,
        *,
        confine: bool = True,
    ) -> subprocess.Popen:
        """Start ``argv`` on ``node`` in a new process group, stdout+stderr to ``log_path``.

        ``env`` is added to the current environment. ``confine=False`` runs the process
        on the node (its network) but outside the node's CPU/memory limits: the metrics
        agent uses it so that its own footprint is not charged to training.
        """

    def oom_killed(self, node: Node) -> int:
        """How many processes the node's memory limit has killed so far (0 if no limit)."""

    def close(self) -> None:
        """Release what this object holds (not the cluster itself)."""


def popen_in_group(argv: Sequence[str], env: Mapping[str, str], log_path: Path,
                   preexec_fn=None) -> subprocess.Popen:
    """Start a process in its own session (so its whole group can be killed), logging to a file."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            list(argv), env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=preexec_fn,
        )


def kill_group(proc: subprocess.Popen, grace_s: float = 2.0) -> int | None:
    """SIGTERM the process group, SIGKILL it after ``grace_s``, and reap the leader."""
    if proc.poll() is None:
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    # Children of the leader may outlive it: kill what is left of the group regardless.
    _signal_group(proc.pid, signal.SIGKILL)
    try:
        return proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        return None


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
