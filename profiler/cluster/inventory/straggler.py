"""A straggler on a real node (``--straggler``): the cell's processes there in a cgroup
v2 group of their own whose ``cpu.max`` slows them.

The processes go into ``/sys/fs/cgroup/edgeprof-straggler/<cell>-<attempt>-<node>``,
written as root (``sudo -n`` unless the SSH user is root); hosts without cgroup v2's cpu
controller are refused when the sweep checks them (``probe.check_hosts``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from ...errors import ClusterError
from ..base import Node
from .hosts import last_line


# A straggler on a real node (``slow_node``): run on the node as root (``sudo -n`` unless
# the SSH user is root), standard library only. ``slow`` waits for the cell's processes
# on the node to be registered in its pids file (``remote_exec``), then moves them and
# their descendants into /sys/fs/cgroup/edgeprof-straggler/<group> with cpu.max set;
# ``restore`` lifts the limit and removes the empty groups. Not under ``edgeprof``: on a
# host that is also an emulated cluster's (cgroup v2), that is the cluster's parent, and
# `edgeprof cluster down` would kill a straggler's processes with the nodes'. The root is
# an argument so that the file handling can be tested against a directory laid out like
# cgroup v2.
# A 10 ms period: short enough that a slowed board is slow all the time rather than in
# bursts of the kernel's default 100 ms (``cgroups.cfs_period_us`` says why that matters).
STRAGGLER_PERIOD_US = 10_000
STRAGGLER_WAIT_S = 60  # for the cell's processes to start on a Pi (ssh, Python, imports)
CGROUP_V2_ROOT = "/sys/fs/cgroup"
_CPU_MAX = """\
import errno, json, os, sys, time
action, root, name = sys.argv[1:4]
PERIOD = %d


def answer(**fields):
    print(json.dumps(fields))
    sys.exit(0)


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ''


def write(path, text):
    with open(path, 'w') as f:
        f.write(text)


base = os.path.join(root, 'edgeprof-straggler')
group = os.path.join(base, name)
if action == 'slow':
    if 'cpu' not in read(os.path.join(root, 'cgroup.controllers')).split():
        answer(ok=False, problem='no cgroup v2 cpu controller in ' + root)
    factor, processes, threads = float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
    pids_file, wait_s = sys.argv[7], float(sys.argv[8])
    for parent in (root, base):
        os.makedirs(parent, exist_ok=True)
        control = os.path.join(parent, 'cgroup.subtree_control')
        if 'cpu' not in read(control).split():
            write(control, '+cpu')
    os.makedirs(group, exist_ok=True)
    cores = factor * min(len(os.sched_getaffinity(0)), processes * threads)
    quota = max(1000, int(round(cores * PERIOD)))
    write(os.path.join(group, 'cpu.max'), '%%d %%d' %% (quota, PERIOD))
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with open(pids_file) as f:
                pids = [int(p) for ps in json.load(f).values() for p in ps]
        except (OSError, ValueError, AttributeError, TypeError):
            pids = []
        if len(pids) >= processes or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    moved, stack = [], list(pids)
    while stack:
        pid = stack.pop()
        try:
            write(os.path.join(group, 'cgroup.procs'), str(pid))
        except OSError:
            continue  # it exited
        moved.append(pid)
        try:
            tasks = os.listdir('/proc/%%d/task' %% pid)
        except OSError:
            tasks = []
        for task in tasks:
            stack += [int(c) for c in read('/proc/%%d/task/%%s/children' %% (pid, task)).split()]
    if not moved:
        answer(ok=False, problem="none of the cell's %%d process(es) on the node appeared "
               "in %%s within %%g s" %% (processes, pids_file, wait_s))
    answer(ok=True, cores=round(cores, 4), cpu_max='%%d %%d' %% (quota, PERIOD), moved=moved)
if os.path.isdir(group):
    write(os.path.join(group, 'cpu.max'), 'max %%d' %% PERIOD)
removed = []
for entry in sorted(os.listdir(base)) if os.path.isdir(base) else []:
    path = os.path.join(base, entry)
    for attempt in range(30):
        try:
            os.rmdir(path)
            removed.append(entry)
            break
        except OSError as exc:
            if path != group or exc.errno != errno.EBUSY:
                break  # another cell's, still busy; or not a cgroup at all
            time.sleep(0.1)  # killed processes still exiting
answer(ok=True, removed=removed)
""" % STRAGGLER_PERIOD_US


def cpu_max_command(python: str, action: str, group: str, args: Sequence[str],
                    root: str = CGROUP_V2_ROOT, elevate: bool = True) -> list[str]:
    """The argv run on a node to ``slow`` or ``restore`` a straggler (see ``_CPU_MAX``);
    as root, through ``sudo -n`` when the SSH user is not root."""
    command = [python, "-c", _CPU_MAX, action, root, group, *args]
    if not elevate:
        return command
    return ["sh", "-c", 'if [ "$(id -u)" -eq 0 ]; then exec "$@"; fi; exec sudo -n "$@"',
            "sh", *command]


def straggler_answer(node: str, returncode: int, stdout: str, stderr: str) -> dict:
    """The node's answer to ``cpu_max_command``, or one ``ClusterError`` line naming it."""
    try:
        answer = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        answer = None
    if returncode == 0 and isinstance(answer, dict) and answer.get("ok"):
        return answer
    if isinstance(answer, dict) and "cgroup v2" in str(answer.get("problem")):
        raise ClusterError(f"node {node} has no cgroup v2 with the cpu controller, which "
                           "--straggler needs on a real node: boot it with cgroup v2 "
                           "(Raspberry Pi OS 11 and later), or drop --straggler")
    if isinstance(answer, dict):
        raise ClusterError(f"cannot slow node {node}: {answer.get('problem')}")
    reason = last_line(stderr)
    if returncode == 255:
        raise ClusterError(f"node {node} is unreachable over SSH ({reason})")
    raise ClusterError(f"cannot write node {node}'s cgroups ({reason}): a straggler on a "
                       "real node needs root there, or passwordless sudo for the SSH user")


def straggler_group(node: Node, cell_dir: Path) -> str:
    """``<cell_id>-attempt-<N>-<node>``: one group per cell attempt and node."""
    cell_dir = Path(cell_dir)
    return f"{cell_dir.parent.name}-{cell_dir.name}-{node.name}"
