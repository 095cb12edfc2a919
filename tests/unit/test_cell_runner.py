"""The cell runner's steps (launch, wait, judge, record) over real processes: tiny shell
roles on the local cluster, one per way a cell can end, each status and reason as a
results row shows it, and no process left behind. About 3 s in all."""

from __future__ import annotations

import psutil
import pytest

from profiler.cell import CellConfig
from profiler.cluster.local import LocalCluster
from profiler.engines.base import Engine, ProcessSpec, TrainOptions
from profiler.errors import ClusterError
from profiler.sweep.cell_run import CellRequest, Launched
from profiler.sweep.events import CellEvents
from profiler.sweep.interrupts import StopRequest
from profiler.sweep.launch import place
from profiler.sweep.record import build_record
from profiler.sweep.runner import run_cell

pytestmark = pytest.mark.timeout(60)


class ShellEngine(Engine):
    """A worker and a server per cell, each a shell command (``roles``)."""

    name = "shell"

    def __init__(self, worker: str, server: str = "sleep 0.2", fail_plan: bool = False):
        self.roles = {"worker": worker, "server": server}
        self.fail_plan = fail_plan

    def nodes_needed(self, cell: CellConfig) -> int:
        return 2

    def plan(self, cell, nodes, cell_dir, options) -> list[ProcessSpec]:
        if self.fail_plan:
            raise RuntimeError("no build of this engine")
        return [ProcessSpec("server", 0, nodes[1], ["sh", "-c", self.roles["server"]],
                            decisive=False),
                ProcessSpec("worker", 0, nodes[0], ["sh", "-c", self.roles["worker"]])]


def _alive_children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE}


def _run(tmp_path, engine: Engine, **kw) -> dict:
    before = _alive_children()
    record = run_cell(CellConfig(), LocalCluster(2), engine, tmp_path / "attempt-1",
                      TrainOptions(), sweep_id="t", monitor_interval_s=None, **kw)
    # Every process of the cell reaped: none of its shells is left.
    assert _alive_children() - before == set()
    return record


@pytest.mark.parametrize("worker, status, reason", [
    ("echo loading; echo boom >&2; exit 1", "failed", "worker-0 exited 1: boom"),
    ("kill -9 $$", "failed", "worker-0 was killed by SIGKILL: (empty log)"),
    ("exit 3", "oom", "out of memory"),  # workloads.train's exit status for it
    ("exit 0", "failed", "workers exited without an end event"),
])
def test_the_worker_s_exit_decides_the_status_and_its_reason(tmp_path, worker, status,
                                                             reason):
    record = _run(tmp_path, ShellEngine(worker))
    assert (record["status"], record["reason"]) == (status, reason)
    assert record["cell_id"] == CellConfig().cell_id and record["attempt"] == 1


def test_a_dead_server_fails_the_cell_naming_it(tmp_path):
    record = _run(tmp_path, ShellEngine("sleep 30", server="echo gone; exit 2"))
    assert (record["status"], record["reason"]) == ("failed", "server-0 exited 2: gone")


def test_a_cell_past_its_timeout_is_stopped_and_every_role_killed(tmp_path):
    record = _run(tmp_path, ShellEngine("sleep 30", server="sleep 30"), timeout_s=0.5)
    assert (record["status"], record["reason"]) == ("timeout", "no result within --timeout 0.5 s")
    assert 0.5 <= record["reaped_at"] - record["launched_at"] < 10


@pytest.mark.parametrize("events, where", [
    (['{"event": "start", "t": 1}'], " (in its first epoch)"),
    (['{"event": "start", "t": 1}', '{"event": "epoch", "epoch": 1, "epoch_s": 1, "t": 2}'],
     " (after epoch 1)"),
    (['{"event": "start", "t": 1}', '{"event": "end", "t": 3}'], " (after its end event)"),
])
def test_a_crashed_worker_s_reason_says_where_its_events_stopped(tmp_path, events, where):
    # A framework that aborts in its own shutdown, after the worker's end event, lost no
    # measurement; the reason tells that apart from a crash mid-training.
    log = tmp_path / "attempt-1" / "events" / "worker-0.jsonl"
    lines = " ".join(f"'{line}'" for line in events)
    worker = f"mkdir -p {log.parent}; printf '%s\\n' {lines} > {log}; kill -ABRT $$"
    record = _run(tmp_path, ShellEngine(worker))
    assert (record["status"], record["reason"]) == (
        "failed", f"worker-0 was killed by SIGABRT: (empty log){where}")


def test_a_failure_to_start_is_the_cell_s_not_the_sweep_s(tmp_path):
    record = _run(tmp_path, ShellEngine("exit 0", fail_plan=True))
    assert (record["status"], record["reason"]) == (
        "failed", "could not run the cell: RuntimeError: no build of this engine")


def test_a_stop_requested_ends_the_cell_as_interrupted(tmp_path):
    stop = StopRequest()
    stop.request()
    record = _run(tmp_path, ShellEngine("sleep 30"), stop=stop)
    assert record["status"] == "failed" and record["reason"] == stop.reason
    assert not (tmp_path / "attempt-1" / "logs").exists()  # nothing was started


def test_every_reason_is_kept_in_the_record(tmp_path):
    """A divergence, a straggler that could not be applied and a broken spool: the
    record names all three, divergence first (none overwrites another)."""
    class Diverged(CellEvents):
        def columns(self, t_launch: float) -> dict:
            return {"divergence": "loss diverged at epoch 2"}

    class BrokenMonitor:
        def summary(self, *args, **kw) -> dict:
            raise OSError("spool torn")

    engine = ShellEngine("exit 0")
    run = place(CellRequest(CellConfig(), tmp_path, LocalCluster(2), engine, TrainOptions(),
                            "t", monitor_interval_s=None))
    run.straggler.problem = "could not slow local0: no cgroup"
    run.monitor = BrokenMonitor()
    run.launched = [Launched(engine.plan(CellConfig(), run.nodes, tmp_path, TrainOptions())[1],
                             proc=None)]
    record = build_record(run, Diverged(), "ok", "")
    assert record["status"] == "failed"  # its times are not what its straggler says
    assert record["reason"] == ("loss diverged at epoch 2; straggler: could not slow local0: "
                                "no cgroup; no metrics summary: spool torn")


class _EntryFailsCluster(LocalCluster):
    """Local nodes of which only the first entered can be entered (as a Swarm entry
    service started on one node before the next one's failed); records ``collect``."""

    def __init__(self):
        super().__init__(3)
        self.entered, self.collected = [], []

    def entry(self, node, *, role=None, origin=None, cell_dir=None):
        if self.entered:
            raise ClusterError(f"node {node.name} cannot be entered")
        self.entered.append(node.name)
        return super().entry(node, role=role, origin=origin, cell_dir=cell_dir)

    def collect(self, cell_dir, nodes):
        self.collected.append(cell_dir)
        return []


class _LauncherEngine(ShellEngine):
    """One launcher (an ``mpirun``) starting the workers on two nodes itself."""

    def nodes_needed(self, cell: CellConfig) -> int:
        return 3

    def plan(self, cell, nodes, cell_dir, options) -> list[ProcessSpec]:
        return [ProcessSpec("worker", 0, nodes[0], ["sh", "-c", "sleep 30"],
                            launches_on=(nodes[1], nodes[2]))]


def test_a_cell_whose_entries_fail_before_launch_is_collected(tmp_path):
    """The launcher's entries are made before it starts; one failing leaves nothing
    launched, and what the others made is still the cluster's to release (collect)."""
    cluster = _EntryFailsCluster()
    record = run_cell(CellConfig(), cluster, _LauncherEngine("true"), tmp_path / "attempt-1",
                      TrainOptions(), sweep_id="t", monitor_interval_s=None)
    assert record["status"] == "failed"
    assert "node local2 cannot be entered" in record["reason"], record["reason"]
    assert cluster.entered == ["local1"] and cluster.collected == [tmp_path / "attempt-1"]
