"""Horovod over Open MPI (``--horovod-ops mpi``): ``mpirun`` on node 0 starting one rank
per node through ``workloads.mpi rsh``, on the local and the emulated cluster; a sweep
comparing it with Gloo; a rank killed; bad input.

Every process is real: Debian's Open MPI 4.1 (``mpirun``, one ``orted`` per node) and
Horovod 0.28.1 built with MPI and Gloo (scripts/setup.sh). Nothing waits a fixed time
after a launch: the killed-rank test waits for the rank's first step in its events
file, and "nothing left" is polled until it holds (or a generous deadline passes).
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from profiler.cluster.base import NodeEntry
from profiler.cluster.local import LocalCluster
from profiler.engines.base import TrainOptions
from profiler.engines.horovod import HorovodEngine, mpi_built
from profiler.sweep.grid import CellConfig, validate
from profiler.sweep.runner import run_cell
from tests.conftest import emulated_nodes, need, no_children_left
from workloads.models import parameter_count
from workloads.mpi import NODE_ENTRIES_ENV

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]
TINY = TrainOptions(val_samples=200)
LEFT_DEADLINE_S = 30.0  # orted and ranks die with their launcher; a loaded host is slow


@pytest.fixture(scope="module")
def mpi():
    need("Horovod built with MXNet (docs/horovod.md)",
         importlib.util.find_spec("horovod.mxnet") is not None)
    need("Open MPI's mpirun (apt-get install openmpi-bin)", shutil.which("mpirun") is not None)
    need("Horovod built with MPI (scripts/setup.sh)", mpi_built())


def _cell(**kw) -> CellConfig:
    return validate(CellConfig(**{"engine": "horovod", "model": "lenet-mlp", "layers": None,
                                  "devices": 2, "batch": 32, "max_samples": 640,
                                  "engine_params": (("horovod_ops", "mpi"),), **kw}))


def _mpi_left(tmp_path: Path) -> list[str]:
    """Any process of this test's cells still alive: a rank names its cell's folder,
    and ``mpirun``, ``orted`` and the rsh agents carry it in their environment (the
    cell's node entries): others' MPI jobs on this host are not this test's."""
    left = []
    for proc in psutil.process_iter(["cmdline", "status", "environ"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        env = proc.info["environ"] or {}
        if str(tmp_path) in cmd or str(tmp_path) in env.get(NODE_ENTRIES_ENV, ""):
            left.append(f"{proc.pid} {cmd[:80]}")
    return left


def _nothing_left(tmp_path: Path) -> list[str]:
    deadline = time.monotonic() + LEFT_DEADLINE_S
    while (left := _mpi_left(tmp_path) + [str(p) for p in no_children_left()]):
        if time.monotonic() > deadline:
            return left
        time.sleep(0.2)
    return []


def _starts(cell_dir: Path) -> list[dict]:
    return sorted((json.loads(line) for path in (cell_dir / "events").glob("worker-*.jsonl")
                   for line in path.read_text().splitlines()
                   if json.loads(line).get("event") == "start"), key=lambda e: e["rank"])


def test_the_plan_is_one_mpirun_on_node_0(mpi, tmp_path):
    from profiler.cluster.base import Node, NodeScope

    nodes = [Node(f"n{i}", address=f"10.9.0.{i + 1}", scope=NodeScope(interfaces=("eth0",)))
             for i in range(3)]
    (spec,) = HorovodEngine().plan(_cell(devices=3), nodes, tmp_path, TINY)
    assert (spec.role, spec.node.name, spec.decisive, spec.title) == (
        "launcher", "n0", True, "launcher-0 (mpirun)")
    assert [n.name for n in spec.launches_on] == ["n0", "n1", "n2"]
    mpirun = spec.argv[spec.argv.index("mpirun"):]
    assert mpirun[mpirun.index("--host") + 1] == "n0:1,n1:1,n2:1"
    assert mpirun[mpirun.index("-np") + 1] == "3"
    for key in ("btl_tcp_if_include", "oob_tcp_if_include"):
        assert mpirun[mpirun.index(key) + 1] == "eth0"
    assert "HOROVOD_CPU_OPERATIONS=mpi" in mpirun and "HOROVOD_CONTROLLER=mpi" in mpirun


def test_two_mpi_ranks_train_on_the_local_cluster(mpi, tmp_path):
    cell = _cell(epochs=2)
    cell_dir = tmp_path / cell.cell_id
    rec = run_cell(cell, LocalCluster(2), HorovodEngine(), cell_dir, TINY, sweep_id="t",
                   timeout_s=300, monitor_interval_s=None)
    assert rec["status"] == "ok", rec["reason"]
    assert rec["horovod_ops"] == "mpi"
    # 640 samples split between 2 ranks, batch 32: 10 allreduce steps each per epoch.
    assert rec["syncs_per_worker"] == 20 and rec["val_accuracy"] > 0.3
    assert [(e["rank"], e["node"], e["comm"], e["num_workers"]) for e in _starts(cell_dir)] == [
        (0, "local0", "allreduce", 2), (1, "local1", "allreduce", 2)]
    logs = sorted(p.name for p in (cell_dir / "logs").iterdir())
    assert logs == ["launcher-0.log", "worker-0.log", "worker-1.log"]
    assert _nothing_left(tmp_path) == []


def test_two_mpi_ranks_allreduce_across_emulated_nodes(mpi, tmp_path):
    from profiler.cluster import netns

    gen = emulated_nodes(2)
    cluster = next(gen)
    try:
        steps = 10
        cell = _cell(max_samples=32 * 2 * steps)
        nodes = cluster.nodes()[:2]
        before = [netns.interface_counters(n.scope.netns) for n in nodes]
        cell_dir = tmp_path / cell.cell_id
        rec = run_cell(cell, cluster, HorovodEngine(), cell_dir, TrainOptions(val_samples=64),
                       sweep_id="t", timeout_s=300, monitor_interval_s=0.5)
        after = [netns.interface_counters(n.scope.netns) for n in nodes]
        assert rec["status"] == "ok", rec["reason"]
        assert rec["cluster"] == "emulated" and rec["syncs_per_worker"] == steps
        assert [(e["rank"], e["node"]) for e in _starts(cell_dir)] == [(0, "n0"), (1, "n1")]
        # Each rank ran in its node's network: ring allreduce at N=2 sends and receives
        # at least the model's bytes per step through each node's own eth0.
        floor_bytes = steps * 4 * parameter_count("lenet-mlp")
        for b, a in zip(before, after):
            assert a["tx_bytes"] - b["tx_bytes"] >= floor_bytes
            assert a["rx_bytes"] - b["rx_bytes"] >= floor_bytes
        # ... and in its node's cgroup, where the node's agent measured it (its network
        # figures are interpolated at the training window's ends: most of the traffic).
        assert rec["cpu_percent_mean"] and rec["cpu_percent_mean"] > 0
        assert rec["net_sent_kb"] and rec["net_sent_kb"] * 1024 >= floor_bytes / 2
        assert _nothing_left(tmp_path) == []
    finally:
        gen.close()


def test_a_sweep_compares_gloo_and_mpi(mpi, tmp_path):
    out = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "profiler.cli", "sweep", "--engine", "horovod",
           "--horovod-ops", "gloo,mpi", "--model", "lenet-mlp", "--devices", "2",
           "--batch", "32", "--max-samples", "640", "--val-samples", "200",
           "--interval", "0.5", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=360)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert sorted(r["horovod_ops"] for r in rows) == ["", "mpi"]  # gloo: the default
    assert len({r["cell_id"] for r in rows}) == 2
    for r in rows:
        assert r["status"] == "ok", r["reason"]
        assert float(r["syncs_per_worker"]) == 10 and float(r["samples_per_s"]) > 0
    assert "horovod_ops=mpi" in proc.stdout
    assert _nothing_left(tmp_path) == []


def _wait_for_first_step(events: Path, rank: int, cell_ended: threading.Event) -> None:
    path = events / f"worker-{rank}.jsonl"
    while not cell_ended.is_set():
        if path.exists() and '"first_step"' in path.read_text():
            return
        time.sleep(0.1)
    raise AssertionError(f"the cell ended before rank {rank}'s first step")


def _rank_pid(cell_dir: Path, rank: int) -> int:
    for proc in psutil.process_iter(["cmdline", "environ"]):
        cmd = proc.info["cmdline"] or []
        env = proc.info["environ"] or {}
        if ("workloads.train" in cmd and str(cell_dir) in " ".join(cmd)
                and env.get("OMPI_COMM_WORLD_RANK") == str(rank)):
            return proc.pid
    raise AssertionError(f"no rank {rank} of {cell_dir} runs")


def test_a_killed_rank_fails_the_cell_and_leaves_nothing(mpi, tmp_path):
    cell = _cell(epochs=200)  # far longer than the test waits: it ends by the kill
    cell_dir = tmp_path / cell.cell_id
    result: dict = {}
    ended = threading.Event()

    def run() -> None:
        try:
            result["rec"] = run_cell(cell, LocalCluster(2), HorovodEngine(), cell_dir, TINY,
                                     sweep_id="t", timeout_s=300, monitor_interval_s=None)
        finally:
            ended.set()

    runner = threading.Thread(target=run)
    runner.start()
    try:
        _wait_for_first_step(cell_dir / "events", 1, ended)
        os.kill(_rank_pid(cell_dir, 1), 9)
    finally:
        runner.join(timeout=120)
    rec = result["rec"]
    assert rec["status"] == "failed"
    assert "worker-1 on local1 was killed by signal 9" in rec["reason"], rec["reason"]
    assert rec["reason"].startswith("launcher-0 (mpirun)")
    assert _nothing_left(tmp_path) == []


def test_bad_input_is_one_line(mpi, tmp_path, monkeypatch):
    from click.testing import CliRunner

    import profiler.engines.horovod as horovod
    from profiler.cli import cli

    args = ["sweep", "--engine", "horovod", "--horovod-ops", "mpi", "--model", "lenet-mlp",
            "--devices", "2", "--max-samples", "320", "--out", str(tmp_path / "out")]
    # mpirun missing: the sweep's own process finds none on PATH.
    empty = tmp_path / "bin"
    empty.mkdir()
    proc = subprocess.run([sys.executable, "-m", "profiler.cli", *args],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PATH": str(empty)})
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "mpirun" in lines[0], proc.stderr
    # Horovod built without MPI (as the Gloo-only build was): the same, before anything.
    monkeypatch.setattr(horovod, "mpi_built", lambda: False)
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert "built without MPI" in result.output and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
    # A typo is refused as any engine setting's.
    result = CliRunner().invoke(cli, [*args[:4], "nccl", *args[5:]])
    assert result.exit_code == 2 and "--horovod-ops 'nccl' is unknown" in result.output


def _sweep_trains(out: Path, proc: subprocess.Popen, within_s: float = 240) -> None:
    """Return at the first step of rank 1 of the sweep in ``out`` (polled every 50 ms)."""
    deadline = time.monotonic() + within_s
    while not any('"first_step"' in p.read_text()
                  for p in out.glob("cells/*/attempt-1/events/worker-1.jsonl")):
        assert proc.poll() is None and time.monotonic() < deadline, "no first step"
        time.sleep(0.05)


def test_ctrl_c_stops_an_mpi_cell_and_leaves_nothing(mpi, tmp_path):
    out = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "profiler.cli", "sweep", "--engine", "horovod",
           "--horovod-ops", "mpi", "--model", "lenet-mlp", "--devices", "2", "--batch", "32",
           "--max-samples", "640", "--epochs", "300", "--val-samples", "200", "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _sweep_trains(out, proc)
        proc.send_signal(2)  # what Ctrl-C sends the sweep
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0
    (row,) = csv.DictReader(open(out / "results.csv"))
    assert row["status"] == "failed" and "interrupted" in row["reason"]
    assert _nothing_left(tmp_path) == []


def test_the_time_limit_ends_an_mpi_cell_and_leaves_nothing(mpi, tmp_path):
    """``--timeout`` of an MPI cell: a cell without end is cut at the limit, ``timeout``
    with its reason, and the launcher's process group (mpirun, the agents, the daemons,
    the ranks) goes with it. Whether the limit falls in the ranks' start or in their
    training, the record is the same."""
    cell = _cell(epochs=100000)  # only the limit can end it, on any host
    rec = run_cell(cell, LocalCluster(2), HorovodEngine(), tmp_path / cell.cell_id, TINY,
                   sweep_id="t", timeout_s=8, monitor_interval_s=None)
    assert (rec["status"], rec["reason"]) == ("timeout", "no result within --timeout 8 s")
    assert _nothing_left(tmp_path) == []


# An orted that cannot start: Open MPI's own daemon, told to use an interface that does
# not exist, fails in its start-up (where a daemonized one used to leave mpirun waiting).
BROKEN_DAEMON = """\
import os, sys
args = sys.argv[1:]
args = ["nosuch0" if i and args[i - 1] == "oob_tcp_if_include" else a
        for i, a in enumerate(args)]
os.execvp(args[0], args)
"""


class _BrokenDaemonCluster(LocalCluster):
    """The local cluster, whose node local1 starts Open MPI's daemon broken."""

    def __init__(self, script: Path):
        super().__init__(2)
        self._script = script

    def entry(self, node, **context) -> NodeEntry:
        if node.name == "local1":
            return NodeEntry((sys.executable, str(self._script)))
        return super().entry(node, **context)


def test_a_daemon_that_fails_at_start_ends_the_cell_at_once(mpi, tmp_path):
    """Not at the time limit (300 s here; Open MPI would wait for it forever): within
    seconds, the reason naming the node, nothing left."""
    script = tmp_path / "broken_orted.py"
    script.write_text(BROKEN_DAEMON)
    cell = _cell(epochs=100000)  # only a failure or the limit can end it
    started = time.monotonic()
    rec = run_cell(cell, _BrokenDaemonCluster(script), HorovodEngine(),
                   tmp_path / cell.cell_id, TINY, sweep_id="t", timeout_s=300,
                   monitor_interval_s=None)
    took_s = time.monotonic() - started
    assert rec["status"] == "failed", rec
    assert "node local1: the MPI daemon (orted) exited" in rec["reason"], rec["reason"]
    assert took_s < 120, f"the cell took {took_s:.0f} s: mpirun waited for the daemon"
    assert _nothing_left(tmp_path) == []


def test_kill_9_then_resume_reruns_the_mpi_cell(mpi, tmp_path):
    """``kill -9`` of the controller during an MPI cell: the parent-death signals take
    the launcher, mpirun, the agents, the daemons and the ranks; ``--resume`` reruns the
    cell as attempt 2, which ends ``ok``."""
    out = tmp_path / "sweep"
    # 300 steps a rank (about 1.5 s on an idle host twice as fast as this one): still
    # ahead at the first step (the kill follows it within a poll, 50 ms), and the
    # rerun stays short where Open MPI's polling ranks share two loaded cores.
    args = ["--engine", "horovod", "--horovod-ops", "mpi", "--model", "lenet-mlp",
            "--devices", "2", "--batch", "8", "--max-samples", "2400", "--epochs", "2",
            "--val-samples", "200", "--out", str(out)]
    proc = subprocess.Popen([sys.executable, "-m", "profiler.cli", "sweep", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _sweep_trains(out, proc)
        proc.kill()
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert _nothing_left(tmp_path) == []
    assert not (out / "results.jsonl").exists() or not (out / "results.jsonl").read_text()
    resumed = subprocess.run([sys.executable, "-m", "profiler.cli", "sweep", *args,
                              "--resume"], capture_output=True, text=True, timeout=400)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    (record,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert record["status"] == "ok" and record["attempt"] == 2, record
    assert record["horovod_ops"] == "mpi" and record["syncs_per_worker"] == 300
    assert (out / "cells" / record["cell_id"] / "attempt-1" / "cell.json").exists()
    assert _nothing_left(tmp_path) == []
