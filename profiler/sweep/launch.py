"""The cell runner's first and last steps: place a cell on its nodes, start its
processes (and the monitor and straggler beside them), and stop all of it again.

``place`` raises only for a cluster too small for the cell; what fails in ``launch``
is the cell's (the runner records it). ``release`` runs in the runner's ``finally``:
every process group started is killed and reaped, the straggler node restored and the
monitor stopped, whatever happened.
"""

from __future__ import annotations

import dataclasses

import json
import subprocess
import time
from pathlib import Path

from workloads.events import NODE_ENV
from workloads.mpi import NODE_ENTRIES_ENV

from ..cluster.base import Cluster, Node, kill_groups
from ..engines import cell_label
from ..engines.base import ProcessSpec
from ..errors import ClusterError
from ..fsutil import atomic_write_text
from .cell_run import CellRequest, CellRun, Launched
from .monitoring import CellMonitor
from .stragglers import Straggler
from .thrashing import ThrashWatch

# Scheduler and servers exit by themselves once the workers finalize; past this grace
# they are killed (a server stuck in ps-lite's shutdown must not hold the sweep).
ROLE_EXIT_GRACE_S = 1.0
KILL_GRACE_S = 1.0  # SIGTERM to SIGKILL, shared by all of a cell's groups


def place(req: CellRequest) -> CellRun:
    """Write the attempt's ``cell.json``, set the nodes up for the cell and pick them;
    measure their clocks and start the clock of the launch."""
    cell, cluster = req.cell, req.cluster
    req.cell_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(req.cell_dir / "cell.json", json.dumps(
        {**cell.fields_record(), "cell_id": cell.cell_id, "attempt": req.attempt}, indent=1,
        sort_keys=True))
    needed = req.engine.nodes_needed(cell)
    # Per-cell node settings (the emulated cluster's quotas per model, time dilation).
    speedup = cluster.prepare(cell, needed, cell.speedup_within(req.max_speedup))
    nodes = cluster.nodes()[:needed]
    if len(nodes) < needed:
        raise ClusterError(f"{cell_label(cell)} needs {needed} nodes, the {cluster.name} cluster "
                           f"has {len(nodes)}: bring up a larger cluster")
    offsets_s = _clock_offsets(cluster, nodes)
    t_launch, t_launch_mono = time.time(), time.monotonic()
    # Providers that limit a node's memory can tell when it thrashes at the limit.
    return CellRun(req, nodes, speedup, offsets_s, t_launch, t_launch_mono,
                   thrash_watch=ThrashWatch(nodes, cluster.memory_pressure),
                   straggler=Straggler(cell, cluster))  # one node slowed (sweep.stragglers)


def launch(run: CellRun) -> None:
    """Plan the cell's processes, start the monitor, then each process (until a stop is
    requested), then the straggler; what is started is in ``run`` as soon as it is."""
    req = run.req
    # The cluster's links between tiers, for an engine whose processes dial across them.
    options = dataclasses.replace(req.options,
                                  link_address=getattr(req.cluster, "link_address", None))
    run.specs = req.engine.plan(req.cell, run.nodes, req.cell_dir, options)
    run.oom_before = {n.name: req.cluster.oom_killed(n) for n in run.nodes}
    if req.monitor_interval_s:
        run.monitor = CellMonitor(req.cluster, req.cell_dir, req.cell, req.sweep_id,
                                  req.monitor_interval_s, traffic_file=req.traffic_file)
        run.monitor.start(run.nodes, req.stop)
    for spec in run.specs:
        if req.stop.requested:
            break
        # The start event names the node (MXNet's ranks are the KVStore's own).
        env = {**spec.env, NODE_ENV: spec.node.name}
        if spec.launches_on:
            # The entries themselves, not the file's path: the launcher may run on a
            # node of its own (the inventory's), where the cell's file is not.
            entries = json.loads(write_entries(req.cluster, spec, req.cell_dir).read_text())
            env[NODE_ENTRIES_ENV] = json.dumps({"cell": str(req.cell_dir),
                                                "nodes": entries})
        proc = req.cluster.start(spec.node, spec.argv, env,
                                 req.cell_dir / "logs" / f"{spec.name}.log", role=spec.role)
        run.launched.append(Launched(spec, proc))
    run.straggler.start(run.specs, run.t_launch_mono, cell_dir=req.cell_dir,
                        threads=req.options.threads_per_process)
    if run.monitor:
        run.monitor.track(_pids_by_node(run.launched), run.nodes)


def release(run: CellRun) -> None:
    """Reap every process, restore the straggler node, stop the monitor."""
    _reap(run)
    run.straggler.stop()  # restores the node, whatever happened
    if run.monitor:
        run.monitor.stop(run.req.stop)


def _reap(run: CellRun) -> None:
    """Let helper roles exit by themselves for a moment, then kill every group at once.

    Interrupted cells skip that moment; a second signal also cuts the SIGTERM grace.
    """
    stop = run.req.stop
    if not stop.requested:
        deadline = time.monotonic() + ROLE_EXIT_GRACE_S
        for p in run.launched:
            if p.returncode is None:
                try:
                    p.returncode = p.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
    codes = kill_groups([p.proc for p in run.launched], grace_s=KILL_GRACE_S,
                        hurry=lambda: stop.hurry)
    for p, code in zip(run.launched, codes):
        if p.returncode is None:
            p.returncode = code


def write_entries(cluster: Cluster, spec: ProcessSpec, cell_dir: Path) -> Path:
    """The file telling a launcher (``spec``) how to enter each node it starts workers
    on (``Cluster.entry``, by node name); ``ClusterError`` where the cluster cannot."""
    entries = {}
    for node in spec.launches_on:
        entry = cluster.entry(node, role="worker", origin=spec.node, cell_dir=cell_dir)
        if entry is None:
            raise ClusterError(f"{spec.title} starts the workers on their nodes itself, and "
                               f"the {cluster.name} cluster cannot give it a way onto node "
                               f"{node.name}")
        entries[node.name] = entry.to_dict()
    path = cell_dir / "entries" / f"{spec.name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(entries, indent=1, sort_keys=True))
    return path


def _clock_offsets(cluster: Cluster, nodes: list[Node]) -> dict[str, float]:
    """Each node's clock minus this host's, for providers whose nodes have their own
    clocks (measured as the cell starts: clocks drift over a sweep of hours)."""
    try:
        return cluster.clock_offsets(nodes)
    except (OSError, ClusterError):
        return {}  # the steps keep the nodes' own clocks; the cell itself may still run


def _pids_by_node(launched: list[Launched]) -> dict[str, dict[str, list[int]]]:
    out: dict[str, dict[str, list[int]]] = {}
    for p in launched:
        out.setdefault(p.spec.node.name, {}).setdefault(p.spec.role, []).append(p.proc.pid)
    return out
