"""Stragglers and unequal nodes on the emulated cluster, for real: PyTorch parameter-server
cells whose workers train under their nodes' CPU quotas, one node slowed by halving its
quota (read back from its cgroup), and a mix of profiles swept through the CLI.

The nodes are small (0.1 cores a worker, 0.5 for the server's node, gigabit links) so
that a step is compute-bound and the cells' quotas fit a loaded 2-core host: a worker
node then gets its quota whatever else runs, and the margins below (a sync worker beside
the straggler uses at most 0.75 of its quota, where half is expected; the typical async
worker at least 1.3 x the straggler's rate beside it, where 2 x is expected) hold. Every
comparison is within one run: the host's other load moves one run against another.
Needs root, like every emulated-cluster test; run under
``flock /tmp/edgeprof-emulated.lock`` (one emulated cluster per host).
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from statistics import median

import pytest

from profiler.cluster.cgroups import cfs_quota_us
from profiler.engines import get_engine
from profiler.engines.base import TrainOptions
from profiler.sweep.grid import CellConfig, validate
from profiler.sweep.runner import run_cell
from tests.conftest import ROOT, need, need_binary, need_root
from workloads.events import read_events

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
WORKER_CORES, SERVER_CORES, FAST_CORES = 0.1, 0.5, 0.2
PROFILES = f"""\
profiles:
  st-server: {{link_mbit: 1000, memory_mb: 1024, cpu_cores: {SERVER_CORES}}}
  st-worker: {{link_mbit: 1000, memory_mb: 1024, cpu_cores: {WORKER_CORES}}}
  st-fast: {{link_mbit: 1000, memory_mb: 1024, cpu_cores: {FAST_CORES}}}
mixes:
  st-uniform:
    nodes: [{{profile: st-server}}, {{profile: st-worker, count: 4}}]
  st-mix:
    nodes: [{{profile: st-server}}, {{profile: st-fast}}, {{profile: st-worker}}]
"""
# LeNet-5 at batch 256: about 0.25 s a step on a 0.1-core node (compute-bound), few
# enough pushes a second that the server's node is no bottleneck. Each worker trains the
# same 2,560 images (replicate): 10 steps, 9 of them timed.
CELL = dict(engine="torch", model="lenet-cnn", layers=None, batch=256, max_samples=2560,
            data_partition="replicate", dataset="synthetic")


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    path = tmp_path_factory.mktemp("profiles") / "profiles.yaml"
    path.write_text(PROFILES)
    before = os.environ.get("EDGEPROF_PROFILES")
    os.environ["EDGEPROF_PROFILES"] = str(path)
    try:
        yield path
    finally:
        if before is None:
            os.environ.pop("EDGEPROF_PROFILES", None)
        else:
            os.environ["EDGEPROF_PROFILES"] = before


@pytest.fixture(scope="module")
def cluster(profiles):
    """A server node and four equal worker nodes, brought up here and taken down after."""
    from profiler.cluster import emulated

    need_root()
    for binary in emulated.REQUIRED_BINARIES:
        need_binary(binary)
    need("torch (scripts/setup.sh)", importlib.util.find_spec("torch") is not None)
    up, brought_up = emulated.ensure_cluster(5, "st-uniform")
    try:
        yield up
    finally:
        if brought_up:
            emulated.down()


def _run(cluster, tmp_path: Path, **kw) -> tuple[dict, Path]:
    cell = validate(CellConfig(**{**CELL, **kw}))
    cell_dir = tmp_path / cell.cell_id
    record = run_cell(cell, cluster, get_engine(cell.engine), cell_dir,
                      TrainOptions(val_samples=64, breakdown=False), sweep_id="t",
                      timeout_s=200, monitor_interval_s=None)
    assert record["status"] == "ok", record["reason"]
    return record, cell_dir


def steady_rates(cell_dir: Path) -> dict[str, float]:
    """Each worker's training rate (samples/s) without its first step, by node."""
    rates = {}
    for path in (cell_dir / "events").glob("worker-*.jsonl"):
        events = read_events(path)
        start = next(e for e in events if e["event"] == "start")
        epoch = next(e for e in events if e["event"] == "epoch")
        samples = (start["steps_per_epoch"] - 1) * start["batch"]
        rates[start["node"]] = samples / (epoch["epoch_s"] - epoch["first_step_s"])
    return rates


def cpu_cores_used(cell_dir: Path) -> dict[str, float]:
    """Each worker's CPU time over its training time (cores), by node: what its node's
    quota let it use, less what it spent waiting. A busy host can only lower it, so a
    bound from above holds however loaded the machine is, within one run."""
    used = {}
    for path in (cell_dir / "events").glob("worker-*.jsonl"):
        events = read_events(path)
        start = next(e for e in events if e["event"] == "start")
        end = next(e for e in events if e["event"] == "end")
        used[start["node"]] = end["train_cpu_s"] / end["train_s"]
    return used


class QuotaWatch:
    """Reads a node's CFS quota (cores) from its cgroup every 20 ms while a cell runs."""

    def __init__(self, node):
        self.dir = Path(node.scope.cgroup_cpu_quota)
        self.readings: list[tuple[float, float]] = []  # (time.time(), cores)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._stop.wait(0.02):
            quota = int((self.dir / "cpu.cfs_quota_us").read_text())
            period = int((self.dir / "cpu.cfs_period_us").read_text())
            if quota > 0:
                self.readings.append((time.time(), quota / period))

    def changes(self, t0: float) -> list[tuple[float, float]]:
        """(seconds after ``t0``, cores) at each change of the quota."""
        out: list[tuple[float, float]] = []
        for t, cores in self.readings:
            if not out or out[-1][1] != cores:
                out.append((round(t - t0, 2), cores))
        return out

    def __enter__(self) -> "QuotaWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _quota_in_force(node) -> tuple[int, int]:
    folder = Path(node.scope.cgroup_cpu_quota)
    return (int((folder / "cpu.cfs_quota_us").read_text()),
            int((folder / "cpu.cfs_period_us").read_text()))


def test_sync_follows_a_straggler_at_half_speed_and_its_quota_comes_back(cluster, tmp_path):
    from profiler.cluster import emulated

    n4 = cluster.nodes()[4]
    baseline, base_dir = _run(cluster, tmp_path, devices=4, sync="sync")
    with QuotaWatch(n4) as watch:
        slowed, slow_dir = _run(cluster, tmp_path, devices=4, sync="sync", straggler="0.5")
    before, after = steady_rates(base_dir), steady_rates(slow_dir)
    print("sync steady samples/s per worker: without", before, "with n4 at 0.5:", after,
          "epoch_s", baseline["epoch_s"], slowed["epoch_s"], "n4's quota:",
          watch.changes(slowed["launched_at"]))
    # The record names the straggler: the node of the last worker (master placement:
    # the server on n0, workers on n1..n4).
    assert (slowed["straggler_node"], slowed["straggler_factor"],
            slowed["straggler_after_s"]) == ("n4", 0.5, 0)
    assert 0 <= slowed["straggler_started_s"] < 2
    assert baseline["straggler_node"] is None and baseline["straggler_factor"] is None
    assert slowed["node_profiles"] == {"n0": "st-server", "n1": "st-worker",
                                       "n2": "st-worker", "n3": "st-worker",
                                       "n4": "st-worker"}
    # n4 ran at half its quota during the cell ...
    assert {round(cores, 3) for _, cores in watch.readings} >= {WORKER_CORES / 2}
    # ... and every worker waited for it: within the run, each one's CPU use at most
    # 0.75 of its own quota (about half: it waits as long as it computes), and the
    # workers at one pace. Not against the baseline run: the host's other load moves
    # the two runs apart (a whole-suite run failed such a comparison).
    used = cpu_cores_used(slow_dir)
    print("sync: cores used by each worker beside n4 at 0.5:", used,
          "without:", cpu_cores_used(base_dir))
    for node in ("n1", "n2", "n3"):
        assert used[node] <= 0.75 * WORKER_CORES, (node, used)
    assert max(after.values()) <= 1.15 * min(after.values()), after
    # Restored: the cgroup holds the profile's quota again, the state forgets the slowing.
    assert _quota_in_force(n4) == cfs_quota_us(WORKER_CORES)
    assert "straggler" not in emulated.attach().state["nodes"][4]


def test_async_workers_keep_their_pace_beside_a_straggler(cluster, tmp_path):
    baseline, base_dir = _run(cluster, tmp_path, devices=4, sync="async")
    slowed, slow_dir = _run(cluster, tmp_path, devices=4, sync="async", straggler="0.5")
    before, after = steady_rates(base_dir), steady_rates(slow_dir)
    print("async steady samples/s per worker: without", before, "with n4 at 0.5:", after)
    assert slowed["straggler_node"] == "n4"
    # Not dragged down to the straggler's pace, as sync workers are: within the one run
    # beside it, the other three step about twice as fast as n4 (measured 1.9-2.2 on a
    # quiet host; a sync cell's workers all go at n4's pace, within 1.15 of each other
    # in the sync test above). 1.3, not 1.5: a whole-suite run on a clean clone failed
    # 1.5 once (2026-11-29; passing alone and beside two busy loops), likely as the
    # exchange, which n4's halved quota does not slow, took more of each step on the
    # loaded host. Within one run, not against the
    # baseline run: the host's other load moves the two runs apart (the median of
    # n1-n3 against the baseline was 0.965-1.03 alone, 0.82 and 1.30 in whole-suite
    # runs, and lower still in one CI run). The median: one worker held up by that load
    # (seen: one of four at 0.75 of the others) must not decide.
    others = median(after[n] for n in ("n1", "n2", "n3"))
    print("async: n1-n3 against the baseline", others / median(before[n] for n in before
                                                               if n != "n4"),
          "against n4 beside them", others / after["n4"])
    assert others >= 1.3 * after["n4"], (before, after)
    # n4 itself ran at its halved quota: at most 0.7 of the whole one, in CPU it used
    # (a bound that host load cannot break; its rate against the baseline run's could).
    assert cpu_cores_used(slow_dir)["n4"] <= 0.7 * WORKER_CORES, cpu_cores_used(slow_dir)


# A one-device cell that only a stop ends, on any host: 100,000 epochs of 23 steps.
# Bounded cells here (6,000 samples: 2-4 s on this host) could end before a moment the
# test waits for on a host fast enough (issue 46).
ENDLESS = dict(CELL, max_samples=6000, epochs=100_000)


def _run_until(cluster, cell: CellConfig, cell_dir: Path, condition) -> dict:
    """Run ``cell`` until ``condition()`` holds (polled every 20 ms), then stop it as
    Ctrl-C would: its record (``failed``, interrupted)."""
    from profiler.sweep.interrupts import StopRequest

    stop = StopRequest()

    def stop_when_done() -> None:
        deadline = time.monotonic() + 120
        while not condition() and time.monotonic() < deadline:
            time.sleep(0.02)
        stop.request()
    watcher = threading.Thread(target=stop_when_done, daemon=True)
    watcher.start()
    record = run_cell(cell, cluster, get_engine(cell.engine), cell_dir,
                      TrainOptions(val_samples=64, breakdown=False), sweep_id="t",
                      timeout_s=200, monitor_interval_s=None, stop=stop)
    watcher.join()
    assert record["status"] == "failed" and "interrupted" in record["reason"], record
    return record


def test_a_straggler_after_t_is_slowed_only_from_t(cluster, tmp_path):
    """A one-device cell: its only node, n0, slowed 1 s after the launch, and the cell
    stopped once the slowing is seen (importing torch alone takes over a second here)."""
    n0 = cluster.nodes()[0]
    cell = validate(CellConfig(**ENDLESS, devices=1, straggler="0.5@1"))
    with QuotaWatch(n0) as watch:
        record = _run_until(cluster, cell, tmp_path / "cell", lambda: any(
            round(cores, 3) == SERVER_CORES / 2 for _, cores in watch.readings))
    t_launch = record["launched_at"]
    slow = [t - t_launch for t, cores in watch.readings if round(cores, 3) == SERVER_CORES / 2]
    full = [t - t_launch for t, cores in watch.readings if round(cores, 3) == SERVER_CORES]
    print("n0 slowed from", min(slow), "s to", max(slow), "s after the launch; record says",
          record["straggler_started_s"])
    assert (record["straggler_node"], record["straggler_after_s"]) == ("n0", 1)
    assert min(slow) >= 1 and record["straggler_started_s"] >= 1
    assert any(0 <= t < 1 for t in full)  # at its own quota before T
    assert _quota_in_force(n0) == cfs_quota_us(SERVER_CORES)


def test_an_interrupted_straggler_cell_gives_the_node_its_quota_back(cluster, tmp_path):
    """Ctrl-C in the middle of a cell whose node is slowed (at its worker's first step):
    the cell is recorded as interrupted and the quota restored in the runner's
    ``finally``."""
    n0 = cluster.nodes()[0]
    cell = validate(CellConfig(**ENDLESS, devices=1, straggler="0.5"))
    events = tmp_path / "cell" / "events" / "worker-0.jsonl"
    with QuotaWatch(n0) as watch:
        record = _run_until(cluster, cell, tmp_path / "cell", lambda: "first_step" in {
            e["event"] for e in read_events(events)})
    assert record["straggler_node"] == "n0" and record["straggler_started_s"] is not None
    assert "first_step" in {e["event"] for e in read_events(events)}  # stopped mid-training
    assert SERVER_CORES / 2 in {round(cores, 3) for _, cores in watch.readings}
    assert _quota_in_force(n0) == cfs_quota_us(SERVER_CORES)


def test_a_node_left_slowed_by_a_killed_sweep_is_set_right_before_the_next_cell(cluster):
    """A sweep killed with ``kill -9`` while n3 was slowed never restores it; the next
    process that attaches reads the quota back from the cgroup in ``prepare``."""
    from profiler.cluster import emulated

    n3 = cluster.nodes()[3]
    cluster.slow_node(n3, 0.5)
    assert _quota_in_force(n3) == cfs_quota_us(WORKER_CORES / 2)
    assert emulated.status()["nodes"][3]["straggler"] == {"factor": 0.5,
                                                          "cpu_cores": WORKER_CORES / 2}
    # Even with the state file saying nothing of it (a crash between the two writes).
    state = json.loads(emulated.STATE_FILE.read_text())
    state["nodes"][3].pop("straggler")
    emulated.STATE_FILE.write_text(json.dumps(state))
    later = emulated.attach()  # the next sweep
    later.prepare(validate(CellConfig(**CELL, devices=4)), 5)
    assert _quota_in_force(n3) == cfs_quota_us(WORKER_CORES)
    assert "straggler" not in emulated.status()["nodes"][3]


def test_a_mix_swept_through_the_cli_records_each_nodes_profile(profiles, tmp_path):
    """``edgeprof sweep --profile`` a mix (a 0.5-core server node, a 0.2 and a 0.1-core
    worker): async workers step in the proportion of their quotas, sync ones at the
    slow node's pace. Runs last: it replaces the module's cluster with the mix."""
    need_root()
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "profiler.cli", "sweep", "--cluster", "emulated",
         "--profile", "st-mix", "--engine", "torch", "--model", "lenet-cnn", "--batch", "256",
         "--devices", "2", "--sync", "sync,async", "--max-samples", "2560",
         "--data-partition", "replicate",
         "--val-samples", "64", "--dataset", "synthetic", "--no-agent", "--no-breakdown",
         "--out", str(out)],
        capture_output=True, text=True, timeout=240, cwd=ROOT,
        env={**os.environ, "EDGEPROF_PROFILES": str(profiles)})
    assert done.returncode == 0, done.stderr[-3000:]
    records = {r["sync"]: r for r in map(json.loads, (out / "results.jsonl").open())}
    rates = {}
    for sync, record in records.items():
        assert record["status"] == "ok", record["reason"]
        assert record["node_profiles"] == {"n0": "st-server", "n1": "st-fast",
                                           "n2": "st-worker"}
        rates[sync] = steady_rates(out / "cells" / record["cell_id"] / "attempt-1")
    print("steady samples/s per worker (n1 0.2 cores, n2 0.1):", rates)
    with open(out / "results.csv", newline="") as table:
        rows = list(csv.DictReader(table))
    assert {json.loads(row["node_profiles"])["n1"] for row in rows} == {"st-fast"}
    # Async: each at its own quota's pace, 2:1 alone (1.9-2.2). A busy host moves it
    # either way, as the node that needs more CPU or the one with the longer CFS period
    # loses more: 3.1:1 and 1.39:1 seen in whole-suite runs. Sync's is 1:1.
    assert 1.25 <= rates["async"]["n1"] / rates["async"]["n2"] <= 3.5
    # Sync: both at the slow node's pace, 1:1 within the run (measured 1.01), and the
    # fast node waited: it used at most 0.75 of its 0.2 cores (about half). Nothing is
    # compared across the two runs: the host's load moves them apart (a CI run saw n2
    # at 578 samples/s async and both workers at 750 sync).
    sync = rates["sync"]
    assert max(sync.values()) <= 1.15 * min(sync.values()), sync
    used = cpu_cores_used(out / "cells" / records["sync"]["cell_id"] / "attempt-1")
    print("sync: cores used (n1 0.2-core quota, n2 0.1):", used)
    assert used["n1"] <= 0.75 * FAST_CORES, used
