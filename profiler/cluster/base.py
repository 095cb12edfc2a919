"""The one small interface every node provider implements: list nodes, start, stop.

A *node* is one device: a local slot (``local``), a network namespace with its own
cgroup (``emulated``) or a real host reached over SSH (``inventory``). Engines never
know which: they get ``Node`` objects and call ``Cluster.start``.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Protocol, Sequence


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


@dataclass(frozen=True)
class MemoryPressure:
    """One reading of a node's memory: its charge, its limit, major page faults so far."""

    used_mb: float
    limit_mb: float
    major_faults: int


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
        role: str | None = None,
    ) -> subprocess.Popen:
        """Start ``argv`` on ``node`` in a new process group, stdout+stderr to ``log_path``.

        ``env`` is added to the current environment, less its secrets
        (``SECRET_ENV_VARS``). The process dies with the thread that started it
        (``popen_in_group``). ``confine=False`` runs the process
        on the node (its network) but outside the node's CPU/memory limits: the metrics
        agent uses it so that its own footprint is not charged to training. ``role``
        (``worker``, ``server``, ...) is for providers whose nodes must tell the node's
        agent which process is which themselves (the inventory cluster).
        """

    def oom_killed(self, node: Node) -> int:
        """How many processes the node's memory limit has killed so far (0 if no limit)."""

    def close(self) -> None:
        """Release what this object holds (not the cluster itself)."""

    # Optional: ``prepare(cell)`` sets the nodes up for one cell before it starts (the
    # emulated cluster's per-model CPU quotas); the runner calls it first.
    # Optional: ``memory_pressure(node) -> MemoryPressure | None`` (providers that limit a
    # node's memory): the runner watches it for thrashing (``sweep.thrashing``).
    # Optional: ``collect(cell_dir, nodes) -> list[str]`` brings what the cell's processes
    # wrote on the nodes back into ``cell_dir`` (providers whose nodes have their own
    # disks); the runner calls it after reaping and returns problems in the reason.
    # Optional: ``slow_node(node, factor, *, cell_dir, processes, threads)`` and
    # ``restore_node(node, *, cell_dir)`` make a node a cell's straggler and undo it
    # (emulated: its CPU quota; inventory: cgroup v2 ``cpu.max``); ``sweep.stragglers``
    # calls them, and ``cluster.STRAGGLER_CLUSTERS`` names the providers that have them.


# Secrets a process gets only if it ships metrics itself (see docs/metrics.md): never
# inherited by workers, servers, schedulers or the per-cell agents, which do not ship.
SECRET_ENV_VARS = ("INFLUX_TOKEN", "GRAFANA_TOKEN", "GRAFANA_PASSWORD")
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def child_env(env: Mapping[str, str]) -> dict[str, str]:
    """This process's environment without secrets, plus ``env``."""
    base = {k: v for k, v in os.environ.items() if k not in SECRET_ENV_VARS}
    return {**base, **env}


def popen_in_group(argv: Sequence[str], env: Mapping[str, str], log_path: Path,
                   preexec_fn=None, *,
                   parent_death_signal: int | None = signal.SIGKILL,
                   stdin: int = subprocess.DEVNULL) -> subprocess.Popen:
    """Start a process in its own session (so its whole group can be killed), logging to a file.

    ``parent_death_signal``: the kernel sends it to the process when the thread that
    started it dies, so that a controller killed with ``kill -9`` leaves no training
    process (nor an agent, which gets SIGTERM and closes its spool) behind. A process
    started in its own session does not get the terminal's SIGINT/SIGHUP: the sweep
    handles those and stops its cells itself. ``stdin=subprocess.PIPE`` keeps a pipe
    open to the process until it is reaped (the inventory cluster's ``ssh``: its end
    stops the remote command).
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    death = _parent_death(parent_death_signal) if parent_death_signal else None

    def prepare() -> None:  # runs in the child, between fork and exec
        if death is not None:
            death()
        if preexec_fn is not None:
            preexec_fn()

    with open(log_path, "ab") as log:
        return subprocess.Popen(
            list(argv), env=child_env(env), stdout=log, stderr=subprocess.STDOUT,
            stdin=stdin, start_new_session=True,
            preexec_fn=prepare if (death or preexec_fn) else None,
        )


def _parent_death(sig: int):
    """A callable for the child: ask for ``sig`` when the parent dies (Linux only)."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None  # not Linux: the sweep's own signal handling still reaps cells
    parent_pid = os.getpid()

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before the request took hold
            os._exit(1)
    return arm


def kill_group(proc: subprocess.Popen, grace_s: float = 2.0) -> int | None:
    """SIGTERM the process group, SIGKILL it after ``grace_s``, and reap the leader."""
    return kill_groups([proc], grace_s)[0]


def kill_groups(procs: Sequence[subprocess.Popen], grace_s: float = 2.0,
                hurry: Callable[[], bool] = lambda: False) -> list[int | None]:
    """Stop many process groups at once: SIGTERM all, SIGKILL all after ``grace_s``.

    All groups share one grace period (a cell of ten nodes stops as fast as one), and
    ``hurry()`` turning true (a second Ctrl-C) cuts it short. Returns each leader's exit
    status (None if it could not be reaped, which only a process stuck in the kernel does).
    """
    for proc in procs:
        if proc.poll() is None:
            _signal_group(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and not hurry():
        if all(proc.poll() is not None for proc in procs):
            break
        time.sleep(0.02)
    # Children of a leader may outlive it: kill what is left of every group regardless.
    for proc in procs:
        _signal_group(proc.pid, signal.SIGKILL)
    codes = []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout=max(1.0, grace_s)))
        except subprocess.TimeoutExpired:
            codes.append(None)
    return codes


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
