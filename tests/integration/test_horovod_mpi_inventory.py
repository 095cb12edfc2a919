"""Horovod over Open MPI on the inventory cluster: ``mpirun`` on node 0 over SSH, the
other nodes' daemons started through the controller's own SSH connections
(``profiler.cluster.inventory.mpi_relay``), beside Gloo in one sweep; a rank on
another node killed, and Ctrl-C; Open MPI missing on a node; a node that refuses SSH
when its daemon starts.

The hosts are emulated Pi 4 nodes serving sshd (``tests.support.sshd``), as in
test_inventory_cluster.py, each with a work folder of its own (so node 1's rank must
write where node 1 keeps the cell, not where node 0 does). Their ``edgeprof_python``
is a wrapper naming this checkout on ``PYTHONPATH``: the venv's editable install may
point at another checkout, whose code the nodes would otherwise run. Nothing waits a
fixed time: the killed-rank test waits for the rank's first step in its events file,
and "nothing left" is polled until it holds.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from profiler.cluster import netns
from profiler.engines.horovod import mpi_built
from tests.conftest import ROOT, need, sshd_nodes

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
EDGEPROF = [sys.executable, "-m", "profiler.cli"]
GONE_WITHIN_S = 20.0
NODES = ("n0", "n1")


def _wrapper(path: Path, extra: str = "") -> Path:
    path.write_text(f"#!/bin/sh\n{extra}export PYTHONPATH={ROOT}\n"
                    f"exec {sys.executable} \"$@\"\n")
    path.chmod(0o755)
    return path


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    need("Horovod built with MXNet (docs/horovod.md)",
         importlib.util.find_spec("horovod.mxnet") is not None)
    need("Open MPI's mpirun (apt-get install openmpi-bin)", shutil.which("mpirun") is not None)
    need("Horovod built with MPI (scripts/setup.sh)", mpi_built())
    work = tmp_path_factory.mktemp("ssh")
    python = _wrapper(work / "python")
    for sshd in sshd_nodes(work, len(NODES), profile="pi4"):
        host_vars = {n: {"edgeprof_workdir": str(work / f"remote-{n}"),
                         "edgeprof_python": str(python)} for n in NODES}
        inventory = sshd.write_inventory(work / "inventory.ini",
                                         {"master": ["n0"], "workers": ["n1"]},
                                         host_vars=host_vars)
        yield {"inventory": inventory, "work": work, "sshd": sshd, "host_vars": host_vars}


def _sweep_argv(inventory: Path, out: Path, *extra: str) -> list[str]:
    return [*EDGEPROF, "sweep", "--cluster", "inventory", "--inventory", str(inventory),
            "--engine", "horovod", "--model", "lenet-mlp", "--dataset", "synthetic",
            "--val-samples", "64", "--devices", "2", "--batch", "32", "--out", str(out),
            *extra]


def _leftovers(hosts, out: Path) -> list[str]:
    """Any process in a node's namespace but sshd itself, and any process here or there
    that names the sweep's folders or is Open MPI's (the local ``ssh`` clients, ``orted``
    started with the relay's help)."""
    found = hosts["sshd"].processes()
    # The nodes' work folders and the key name what of a sweep runs here (the local
    # ssh clients) and there; sshd's own command names its config, in that folder too.
    marks = (str(out), str(hosts["work"] / "remote-"), str(hosts["sshd"].key_path))
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if any(mark in cmd for mark in marks) and "pytest" not in cmd:
            found.append(f"{p.info['pid']}: {cmd[:160]}")
    return found


def _wait_gone(hosts, out: Path) -> list[str]:
    deadline = time.monotonic() + GONE_WITHIN_S
    while (left := _leftovers(hosts, out)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def _starts(cell_dir: Path) -> list[tuple]:
    events = [json.loads(line) for path in (cell_dir / "events").glob("worker-*.jsonl")
              for line in path.read_text().splitlines()]
    return sorted((e["rank"], e["node"]) for e in events if e.get("event") == "start")


def test_mpi_and_gloo_cells_over_ssh(hosts, tmp_path):
    out = tmp_path / "sweep"
    done = subprocess.run(_sweep_argv(hosts["inventory"], out, "--horovod-ops", "gloo,mpi",
                                      "--max-samples", "640", "--interval", "0.5"),
                          cwd=ROOT, capture_output=True, text=True, timeout=500)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert sorted(r["horovod_ops"] for r in rows) == ["", "mpi"]
    for row in rows:
        assert row["status"] == "ok", row["reason"]
        assert row["cluster"] == "inventory" and float(row["syncs_per_worker"]) == 10
        cell = out / "cells" / row["cell_id"] / "attempt-1"
        # Each rank ran on its node and wrote its events where that node keeps the
        # cell: they came home with that node's folder.
        assert _starts(cell) == [(0, "n0"), (1, "n1")]
        assert sorted(p.name for p in (cell / "metrics").iterdir()) == list(NODES)
        if row["horovod_ops"] == "mpi":
            logs = sorted(p.name for p in (cell / "logs").iterdir()
                          if not p.name.startswith("agent-"))
            # node 1's daemon was started through the controller's connection to n1.
            assert logs == ["launcher-0.log", "orted-n1.log", "worker-0.log",
                            "worker-1.log"], logs
            assert float(row["net_sent_kb"]) > 0
    # Nothing of either cell is left on a node, and the relay's socket is gone from n0.
    assert _wait_gone(hosts, out) == []
    assert not list(Path("/tmp").glob("edgeprof-mpi-*.sock"))


def _rank_pid(node, rank: int) -> int | None:
    for pid in netns.netns_pids(node.scope.netns):
        try:
            proc = psutil.Process(pid)
            if ("workloads.train" in proc.cmdline()
                    and proc.environ().get("OMPI_COMM_WORLD_RANK") == str(rank)):
                return pid
        except psutil.Error:
            continue
    return None


def _training_mpi_sweep(hosts, out: Path) -> subprocess.Popen:
    """An MPI sweep that only a fault or a signal ends (100,000 epochs, on any host),
    returned once rank 1 on n1 has made its first step."""
    proc = subprocess.Popen(_sweep_argv(hosts["inventory"], out, "--horovod-ops", "mpi",
                                        "--max-samples", "640", "--epochs", "100000"),
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    remote_events = hosts["work"] / "remote-n1" / out.name / "cells"
    deadline = time.monotonic() + 300
    while not any('"first_step"' in p.read_text()
                  for p in remote_events.glob("*/attempt-1/events/worker-1.jsonl")):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("no first step: " + proc.communicate()[1][-2000:])
        time.sleep(0.1)
    return proc


@pytest.mark.parametrize("fault", ["rank 1 killed", "ctrl-c"])
def test_a_fault_or_ctrl_c_ends_the_cell_and_leaves_nothing_on_any_node(hosts, tmp_path,
                                                                        fault):
    """Rank 1 (on n1, its daemon started by the relay) killed: the cell fails naming it.
    Ctrl-C: the sweep stops the cell. Either way no daemon, rank or ssh is left."""
    out = tmp_path / "sweep"
    proc = _training_mpi_sweep(hosts, out)
    try:
        if fault == "ctrl-c":
            proc.send_signal(signal.SIGINT)
        else:
            pid = _rank_pid(hosts["sshd"].nodes[1], 1)
            assert pid is not None, "rank 1 is not running in n1's namespace"
            os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    (row,) = csv.DictReader(open(out / "results.csv"))
    assert row["status"] == "failed"
    if fault == "ctrl-c":
        assert proc.returncode != 0 and "interrupted" in row["reason"], row["reason"]
    else:
        assert row["reason"].startswith("launcher-0 (mpirun)"), row["reason"]
        assert "worker-1 on n1 was killed by signal 9" in row["reason"], row["reason"]
    assert _wait_gone(hosts, out) == []


def test_open_mpi_missing_on_a_node_is_one_line_before_anything_runs(hosts, tmp_path):
    """n1's Python sees no ``orted`` (a PATH without Open MPI): the sweep's check of the
    hosts names n1 and the fix, exit 2, and writes nothing. (A Gloo-only sweep on the
    same hosts is not refused: it does not need Open MPI.)"""
    bare = tmp_path / "bin"
    bare.mkdir()
    python = _wrapper(tmp_path / "python-without-mpi", f"export PATH={bare}\n")
    host_vars = {**hosts["host_vars"],
                 "n1": {**hosts["host_vars"]["n1"], "edgeprof_python": str(python)}}
    inventory = hosts["sshd"].write_inventory(tmp_path / "inventory.ini",
                                              {"master": ["n0"], "workers": ["n1"]},
                                              host_vars=host_vars)
    out = tmp_path / "sweep"
    done = subprocess.run(_sweep_argv(inventory, out, "--horovod-ops", "gloo,mpi",
                                      "--max-samples", "64"),
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "host n1" in lines[0] and "no orted on PATH" in lines[0], lines[0]
    assert "apt-get install openmpi-bin" in lines[0]
    assert not out.exists()


def test_a_node_unreachable_when_its_daemon_starts_is_named(hosts, tmp_path):
    """The inventory's n1 refuses SSH (a port nothing listens on: the sweep's check
    would refuse it, here it goes missing after). The relay's ssh to it fails, and the
    cell's reason names n1 and says so; nothing is left on n0."""
    import dataclasses

    from profiler.cluster.inventory.cluster import InventoryCluster
    from profiler.cluster.inventory.hosts import read_inventory
    from profiler.engines.base import TrainOptions
    from profiler.engines.horovod import HorovodEngine
    from profiler.sweep.grid import CellConfig, validate
    from profiler.sweep.runner import run_cell

    n0, n1 = read_inventory(hosts["inventory"])
    cluster = InventoryCluster([n0, dataclasses.replace(n1, port=1)])
    cell = validate(CellConfig(engine="horovod", model="lenet-mlp", layers=None, devices=2,
                               batch=32, max_samples=640, epochs=100000,
                               engine_params=(("horovod_ops", "mpi"),)))
    out = tmp_path / "sweep"
    cell_dir = out / "cells" / cell.cell_id / "attempt-1"
    try:
        rec = run_cell(cell, cluster, HorovodEngine(), cell_dir, TrainOptions(val_samples=64),
                       sweep_id="t", timeout_s=300, monitor_interval_s=None)
    finally:
        cluster.close()
    assert rec["status"] == "failed"
    assert "node n1: unreachable over SSH" in rec["reason"], rec["reason"]
    assert "Connection refused" in rec["reason"], rec["reason"]  # ssh's own words
    assert _wait_gone(hosts, out) == []
