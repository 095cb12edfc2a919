"""The command line of a per-node agent, as the cell runner starts it beside a cell.

The runner starts it with ``confine=False`` on the node (its network namespace, outside
its CPU/memory cgroup): the node's cgroup directories come from ``node.scope`` and are
passed here, so the agent reads the node's CPU and memory as a container runtime would.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..cluster.base import Node


def agent_argv(node: Node, spool_dir: Path, pids_file: Path, tags: dict[str, str],
               interval_s: float) -> list[str]:
    """``python -m profiler.agent ...`` for ``node``, spooling into ``spool_dir``."""
    argv = [sys.executable, "-m", "profiler.agent", "--node", node.name,
            "--spool", str(spool_dir), "--pids-file", str(pids_file),
            "--interval", repr(float(interval_s))]
    for key, value in sorted(tags.items()):
        if key != "node" and value is not None and str(value) != "":
            argv += ["--tag", f"{key}={value}"]
    scope = node.scope
    if scope.interfaces:
        argv += ["--interfaces", ",".join(scope.interfaces)]
    if scope.cgroup_cpu:
        argv += ["--cgroup-cpu", scope.cgroup_cpu]
    if scope.cgroup_memory:
        argv += ["--cgroup-memory", scope.cgroup_memory]
    if node.cpu_cores:
        argv += ["--cpu-cores", repr(float(node.cpu_cores))]
    if scope.board_cores:
        argv += ["--board-cores", str(scope.board_cores)]
    if node.memory_mb:
        argv += ["--memory-mb", str(node.memory_mb)]
    return argv
