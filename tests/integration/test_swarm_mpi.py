"""Horovod over Open MPI (``--horovod-ops mpi``) on the Swarm provider: ``mpirun`` in the
launcher's container on node 0 starting node 1's ``orted`` through the entry service
there (``profiler.cluster.swarm.mpi_entry``), on the same two emulated Pi 4 Swarm as
tests/integration/test_swarm_cluster.py (its fixtures: the session's development
image, with Open MPI's ``openmpi-bin`` in it, and nothing of edgeprof's left on the
Swarm or any node after each test).

A sweep compares Gloo and MPI on the same cell; a rank's container on node 1 killed at
its first step (its events say so) fails the MPI cell with a reason naming the node,
and leaves no service, network, container, ``orted`` or ``mpirun``.

Needs what test_swarm_cluster.py needs, and Horovod built with MPI and Gloo.
"""

from __future__ import annotations

import time
from pathlib import Path

import psutil
import pytest

from tests.integration import test_horovod_mpi, test_swarm_cluster as on_swarm
from tests.integration.test_swarm_cluster import (_kill_worker_task, _records,
                                                  _start_training, _sweep)

# Those modules' fixtures, here too: the session's image, the Swarm, nothing left on it;
# Horovod built with MPI and Open MPI here.
dev_image_tar, swarm, nothing_left = (on_swarm.dev_image_tar, on_swarm.swarm,
                                      on_swarm.nothing_left)
mpi = test_horovod_mpi.mpi

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
SMALL = ("--engine", "horovod", "--model", "lenet-mlp", "--batch", "32", "--devices", "2",
         "--epochs", "1", "--max-samples", "256", "--val-samples", "64")
LEFT_DEADLINE_S = 30.0


def _mpi_left(out: Path) -> list[str]:
    """Any ``orted``, ``mpirun`` or rank of this sweep's cells still running, in a
    container or not (a container's processes are this kernel's)."""
    left = []
    deadline = time.monotonic() + LEFT_DEADLINE_S
    while True:
        left = []
        for proc in psutil.process_iter(["name", "cmdline", "status"]):
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            cmd = " ".join(proc.info["cmdline"] or [])
            if str(out) in cmd or (proc.info["name"] in ("orted", "mpirun")
                                   and str(out) in _environ(proc)):
                left.append(f"{proc.pid} {cmd[:100]}")
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def _environ(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.environ().values())
    except (psutil.Error, OSError):
        return ""


def test_gloo_and_mpi_cells_on_the_swarm_are_ok(swarm, mpi, tmp_path):
    out = tmp_path / "out"
    done = _sweep(swarm, out, *SMALL, "--horovod-ops", "gloo,mpi")
    assert done.returncode == 0, done.stderr[-3000:]
    records = _records(out)
    assert sorted(r.get("horovod_ops") or "gloo" for r in records) == ["gloo", "mpi"]
    for record in records:
        assert record["status"] == "ok", record["reason"]
        assert record["syncs_per_worker"] == 4
        ops = record.get("horovod_ops") or "gloo"
        print(f"{ops}: first step {record['first_step_s']:.1f} s after launch, "
              f"{record['samples_per_s']:.1f} samples/s")
        cell_dir = out / "cells" / record["cell_id"] / f"attempt-{record['attempt']}"
        nodes = set()
        for rank in range(2):
            lines = (cell_dir / "events" / f"worker-{rank}.jsonl").read_text().splitlines()
            nodes.add(next(line for line in lines if '"start"' in line).split(
                '"node": "')[1].split('"')[0])
            assert any('"first_step"' in line for line in lines)
        assert nodes == {"n0", "n1"}
        assert record["metrics_nodes"] == 2
    (mpi_record,) = [r for r in records if r.get("horovod_ops") == "mpi"]
    cell_dir = out / "cells" / mpi_record["cell_id"] / f"attempt-{mpi_record['attempt']}"
    ticket = cell_dir / "entries" / "n1.ticket"
    assert ticket.stat().st_mode & 0o777 == 0o600
    secret = ticket.read_text()
    assert not [log.name for log in (cell_dir / "logs").glob("*.log")
                if secret in log.read_text(errors="replace")]
    assert _mpi_left(out) == []


def test_a_rank_s_container_killed_fails_the_mpi_cell_naming_the_node(swarm, mpi, tmp_path):
    out = tmp_path / "out"
    # Unbounded: the cell cannot end before the kill, on any host.
    sweep = _start_training(swarm, out, tmp_path / "sweep.log", (
        *SMALL[:-6], "--epochs", "100000", "--max-samples", "60000", "--val-samples", "64",
        "--horovod-ops", "mpi"))
    _kill_worker_task(swarm, sweep)  # node 1's: the entry, with orted and rank 1
    (record,) = _records(out)
    print(record["reason"])
    assert record["status"] == "failed"
    assert record["reason"].startswith("launcher-0 (mpirun)"), record["reason"]
    assert "n1" in record["reason"], record["reason"]
    assert _mpi_left(out) == []
