"""Join the node's CPU limit once start-up is over (emulated cluster).

Importing MXNet costs about 2 CPU-seconds (operator registration); under the small CPU
quota of an emulated Pi-class node, let alone one calibrated to a real board's training
rate (``edgeprof cluster calibrate``), that alone would take minutes per process and per
cell, and it is not what the study measured. So the emulated cluster starts the
training roles (workers, servers, scheduler) inside the node's memory limit and CPU
accounting but outside its CPU quota, and names the quota's cgroup in
``EDGEPROF_JOIN_CPU_CGROUP``; each role calls ``join_cpu_limit()`` when its start-up is
done: a worker before its first training step, a server or scheduler once MXNet is
imported and before it serves. From then on every thread of the process is limited.
Elsewhere (local cluster, real nodes) the variable is unset and this does nothing.
"""

from __future__ import annotations

import os

JOIN_CPU_CGROUP_ENV = "EDGEPROF_JOIN_CPU_CGROUP"


def join_cpu_limit() -> bool:
    """Move this process (all its threads) into the node's CPU cgroup; whether it did."""
    procs_file = os.environ.pop(JOIN_CPU_CGROUP_ENV, None)
    if not procs_file:
        return False
    # cgroup v1: writing the pid to cgroup.procs moves the whole thread group.
    with open(procs_file, "w") as handle:
        handle.write(str(os.getpid()))
    return True
