"""Per-cell overhead of the SSH (inventory) cluster against the emulated cluster, one run.

The same nodes serve both: three emulated Pi-class nodes (network namespaces, shaped
100 Mbit links), reached directly (``--cluster emulated``: nsenter) and over SSH
(``--cluster inventory``: sshd in each namespace and in the node's cgroups, so that
what it starts runs under the same CPU quota, ``tests.support.sshd``). Each cluster
is opened once, as a sweep opens it (what a sweep pays once, its hosts' check and its
connections, is printed apart), and the same tiny cells run on each, alternating, so
that a noisy machine hits both alike. For each
cell: wall time from launch to the last process reaped, training time (the workers'
own ``train_s``), and the overhead = wall - training (process start, MXNet import,
KVStore setup, evaluation, reaping; and for SSH: the connections, remote_exec). The
whole cell (``run_cell``: also the clock offsets measured before the launch and
bringing the cell folder back after the reaping) is timed too, and so is each phase:

- ``clock``: ``Cluster.clock_offsets`` before the launch;
- ``launch>start``: the launch to the first worker's ``start`` event (connections,
  remote_exec, the worker's imports and data);
- ``end>reaped``: the last worker's ``end`` event to the reaping (exits seen, the
  scheduler's and servers' grace, the agents stopped), of which ``reap`` and
  ``agents stop`` are the runner's two steps;
- ``collect``: ``Cluster.collect`` (tar of each node's cell folder back);
- ``ssh``: ssh processes started per cell, and what one ``ssh HOST true`` costs
  (connection set-up) and ``ssh HOST python -m profiler.cluster.remote_exec -- true``.

Prints the medians per phase and the ratios SSH/emulated of the overhead and the wall.

    sudo .venv/bin/python benchmarks/bench_ssh_overhead.py [--cells 3] [--all-in-quota]
        [--host-bashrc]

``--all-in-quota`` and ``--host-bashrc`` undo the test hosts' two likenesses to the
emulated cluster's nodes and a fresh board (``tests.support.sshd``): every session's
start-up at the node's CPU quota, and this machine's ``~/.bashrc`` in every session.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("OMP_NUM_THREADS", "1")

from profiler.cell import CellConfig  # noqa: E402
from profiler.cluster import cluster_settings, emulated  # noqa: E402
from profiler.cluster.base import Cluster  # noqa: E402
from profiler.cluster.inventory.cluster import InventoryCluster  # noqa: E402
from profiler.sweep import monitoring, runner  # noqa: E402
from profiler.sweep.events import read_cell_events  # noqa: E402
from profiler.sweep.grid import validate  # noqa: E402
from profiler.sweep.needs import grid_needs  # noqa: E402
from profiler.engines import get_engine  # noqa: E402
from profiler.engines.base import TrainOptions  # noqa: E402
from tests.support.sshd import SshdNodes  # noqa: E402

PHASES = ("clock", "launch>start", "train", "end>reaped", "reap", "agents stop", "collect",
          "overhead", "wall", "cell", "cell overhead")


class Phases:
    """Time-stamps of one cell's phases, taken by wrapping the runner's steps."""

    def __init__(self) -> None:
        self.current: dict[str, float] = {}
        self.ssh: list[list] = []  # [kind, started, ended]

    def wrap(self, owner, name: str, phase: str) -> None:
        original = getattr(owner, name)

        def timed(*args, **kwargs):
            t0 = time.monotonic()
            try:
                return original(*args, **kwargs)
            finally:
                self.current[phase] = self.current.get(phase, 0.0) + time.monotonic() - t0
        setattr(owner, name, timed)

    def popen_class(self):
        phases = self

        class CountingPopen(subprocess.Popen):
            """Counts the ssh processes started and times each to its exit."""

            def __init__(self, args, *rest, **kwargs):
                self._ssh_entry = None
                super().__init__(args, *rest, **kwargs)
                argv = list(args) if not isinstance(args, (str, bytes)) else [args]
                if argv and os.path.basename(str(argv[0])) == "ssh":
                    self._ssh_entry = [_ssh_kind(argv), time.monotonic(), None]
                    phases.ssh.append(self._ssh_entry)

            def _seen_exit(self):
                if self._ssh_entry and self._ssh_entry[2] is None and \
                        self.returncode is not None:
                    self._ssh_entry[2] = time.monotonic()

            def poll(self):
                code = super().poll()
                self._seen_exit()
                return code

            def wait(self, timeout=None):
                try:
                    return super().wait(timeout)
                finally:
                    self._seen_exit()
        return CountingPopen


def _ssh_kind(argv: list[str]) -> str:
    remote = argv[-1]
    if "-O" in argv:
        return "control"
    if "remote_exec" in remote:
        return "agent" if "profiler.agent" in remote else "process"
    if remote == "true":
        return "connect"
    for word, kind in (("time.time", "clock"), ("tar ", "tar"), ("rm -rf", "rm"),
                       ("host_check", "probe")):
        if word in remote:
            return kind
    return "other"


def _connection_costs(inventory: Path) -> dict[str, float]:
    """Median of ``ssh HOST true`` and of remote_exec running ``true``, over the nodes."""
    from profiler.cluster.inventory.hosts import read_inventory

    hosts = read_inventory(inventory)
    costs: dict[str, list[float]] = {"ssh true": [], "ssh remote_exec true": []}
    cluster = InventoryCluster(hosts)
    try:
        for _ in range(3):
            for host in hosts:
                for label, remote in (("ssh true", ["true"]),
                                      ("ssh remote_exec true",
                                       [host.python, "-m", "profiler.cluster.remote_exec",
                                        "--", "true"])):
                    t0 = time.monotonic()
                    argv = (cluster.ssh_argv(host, remote) if hasattr(cluster, "ssh_argv")
                            else host.ssh(remote))
                    # stdin open until the end, as a cell's: its end stops remote_exec.
                    with subprocess.Popen(argv, stdin=subprocess.PIPE,
                                          stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL) as proc:
                        if proc.wait(timeout=60) != 0:
                            raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}")
                    costs[label].append(time.monotonic() - t0)
    finally:
        cluster.close()
    return {label: statistics.median(values) for label, values in costs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=3, help="cells per cluster")
    parser.add_argument("--host-bashrc", action="store_true",
                        help="the sessions read this machine's ~/.bashrc, not a stock one "
                             "(tests.support.sshd)")
    parser.add_argument("--all-in-quota", action="store_true",
                        help="every SSH session pays its start-up at the node's CPU quota, "
                             "where the emulated cluster starts its roles outside it "
                             "(tests.support.sshd)")
    args = parser.parse_args()
    if args.cells < 1:
        parser.error("--cells must be at least 1")
    phases = Phases()
    phases.wrap(Cluster, "clock_offsets", "clock")
    phases.wrap(InventoryCluster, "clock_offsets", "clock")
    phases.wrap(InventoryCluster, "collect", "collect")
    phases.wrap(runner, "_reap", "reap")
    phases.wrap(monitoring.CellMonitor, "stop", "agents stop")
    subprocess.Popen = phases.popen_class()

    cluster, brought_up = emulated.ensure_cluster(3)
    work = Path(tempfile.mkdtemp(prefix="bench-ssh-"))
    results: dict[str, list[dict]] = {"emulated": [], "inventory": []}
    once: dict[str, float] = {}
    ssh_counts: list[Counter] = []
    ssh_durations: dict[str, list[float]] = {}
    cells = [validate(CellConfig(model="lenet-mlp", layers=None, devices=2, batch=32,
                                 max_samples=2048, dataset="synthetic", epochs=1,
                                 lr=0.02 + index * 1e-4)) for index in range(args.cells)]
    engine = get_engine(cells[0].engine)
    options = TrainOptions(val_samples=256)
    try:
        # sshd inside the nodes' cgroups: processes it starts get the same CPU and memory
        # limits as the emulated cluster's own.
        with SshdNodes(cluster.nodes()[:3], work, cluster=cluster,
                       stock_shell_rc=not args.host_bashrc,
                       startup_outside_quota=not args.all_in_quota) as sshd, \
                contextlib.ExitStack() as stack:
            inventory = sshd.write_inventory(
                work / "inventory.ini", {"master": ["n0"], "workers": ["n1", "n2"]},
                host_vars={n: {"edgeprof_workdir": str(work / f"remote-{n}"),
                               "edgeprof_python": sys.executable} for n in ("n0", "n1", "n2")})
            connection = _connection_costs(inventory)
            # Each cluster opened once, as a sweep does; what a sweep pays once (the hosts'
            # check, the connections, the clock echoes) is timed apart from the cells.
            clusters = {}
            for name in results:
                provider = cluster_settings(
                    name, inventory=inventory if name == "inventory" else None)
                t0 = time.monotonic()
                needs = dataclasses.replace(grid_needs(cells), nodes=3)
                provider.check(needs)
                clusters[name] = stack.enter_context(provider.open(needs))
                clusters[name].clock_offsets(clusters[name].nodes()[:3])
                once[name] = time.monotonic() - t0
            for index, cell in enumerate(cells):
                for name, opened in clusters.items():
                    cell_dir = work / name / "cells" / cell.cell_id / "attempt-1"
                    phases.current, phases.ssh = {}, []
                    t0 = time.monotonic()
                    record = runner.run_cell(cell, opened, engine, cell_dir, options,
                                             sweep_id=f"bench-{name}", monitor_interval_s=1.0)
                    phases.current["cell"] = time.monotonic() - t0
                    assert record["status"] == "ok", record["reason"]
                    results[name].append(_phases(record, cell_dir, phases.current))
                    if name == "inventory":
                        ssh_counts.append(Counter(kind for kind, _, _ in phases.ssh))
                        for kind, started, ended in phases.ssh:
                            if ended is not None:
                                ssh_durations.setdefault(kind, []).append(ended - started)
    finally:
        if brought_up:
            emulated.down()

    print(f"{args.cells} cells each: LeNet-MLP, 2 workers + master, dist_sync, 2,048 samples "
          "(medians, s)")
    print(f"{'phase':<14} {'emulated':>9} {'inventory':>10} {'ssh-emu':>8}")
    medians = {name: {phase: statistics.median(r[phase] for r in records)
                      for phase in PHASES}
               for name, records in results.items()}
    for phase in PHASES:
        emu, inv = medians["emulated"][phase], medians["inventory"][phase]
        print(f"{phase:<14} {emu:>9.2f} {inv:>10.2f} {inv - emu:>+8.2f}")
    kinds = sorted({kind for counts in ssh_counts for kind in counts})
    per_cell = {kind: statistics.median(c.get(kind, 0) for c in ssh_counts) for kind in kinds}
    print(f"ssh processes per cell (median): {sum(per_cell.values()):g} = " +
          ", ".join(f"{kind} {n:g}" for kind, n in per_cell.items()))
    print("ssh process lifetimes (median s): " + ", ".join(
        f"{kind} {statistics.median(values):.2f}"
        for kind, values in sorted(ssh_durations.items())))
    print("connection (median s over the nodes): " + ", ".join(
        f"{label} {value:.3f}" for label, value in connection.items()))
    print("once per sweep (check, open, first clock offsets): " + ", ".join(
        f"{name} {value:.2f}" for name, value in once.items()))
    emu, inv = medians["emulated"], medians["inventory"]
    print(f"ratio SSH/emulated: overhead {inv['overhead'] / emu['overhead']:.2f}, "
          f"wall {inv['wall'] / emu['wall']:.2f}, "
          f"cell overhead {inv['cell overhead'] / emu['cell overhead']:.2f}, "
          f"cell {inv['cell'] / emu['cell']:.2f}")


def _phases(record: dict, cell_dir: Path, timed: dict[str, float]) -> dict[str, float]:
    """One cell's phases from its record, its events and the wrapped steps' times."""
    window = read_cell_events(cell_dir / "events").train_window()
    wall = record["reaped_at"] - record["launched_at"]
    train = record["train_s"]
    out = {"wall": wall, "train": train, "overhead": wall - train,
           "launch>start": window[0] - record["launched_at"],
           "end>reaped": record["reaped_at"] - window[1],
           "cell overhead": timed["cell"] - train}
    for phase in ("clock", "reap", "agents stop", "collect", "cell"):
        out[phase] = timed.get(phase, 0.0)
    return out


if __name__ == "__main__":
    main()
