"""Stragglers and unequal nodes without a cluster: the setting, the grid, the timer, the
real-node commands and the throttling judgement.

The timer is driven against a recording stand-in for a provider (it only needs
``slow_node``/``restore_node``); the emulated cluster's own slowing is tested for real in
``tests/integration/test_stragglers.py``. The real-node command runs here as a real
process against a folder laid out like cgroup v2 (this host has cgroup v1 only), and
the throttling samples stand in for a Raspberry Pi's firmware words.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from profiler.metrics.summary import throttled_during
from profiler.cell import CellConfig
from profiler.cluster import PROVIDERS, cluster_settings
from profiler.sweep.needs import grid_needs
from profiler.cluster.base import Cluster, Node
from profiler.cluster.cgroups import NodeCgroup, cfs_quota_us
from profiler.cluster.inventory.hosts import Host
from profiler.cluster.inventory.probe import check_hosts
from profiler.cluster.inventory.straggler import (STRAGGLER_PERIOD_US, cpu_max_command,
                                                  straggler_answer)
from profiler.engines.base import ProcessSpec
from profiler.errors import ClusterError, ConfigError
from profiler.sweep import grid, stragglers
from profiler.sweep.stragglers import Straggler, StragglerSpec


@pytest.mark.parametrize("text, spec", [
    ("none", None), ("NONE", None), ("0.5", StragglerSpec(0.5, 0.0)), ("1", StragglerSpec(1, 0)),
    ("0.25@30", StragglerSpec(0.25, 30.0)), (" 0.5@0 ", StragglerSpec(0.5, 0.0)),
    ("5e-1@1.5", StragglerSpec(0.5, 1.5)),
])
def test_settings_parse(text, spec):
    assert stragglers.parse(text) == spec


@pytest.mark.parametrize("text, words", [
    ("0", ["--straggler 0", "(0, 1]", "--straggler none,0.5,0.5@30"]),
    ("1.5", ["1.5", "(0, 1]"]), ("-0.5", ["(0, 1]"]), ("nan", ["(0, 1]"]),
    ("0.5@-1", ["0.5@-1", "T must be 0 or more"]), ("0.5@inf", ["T must be"]),
    ("half", ["'half' is not none, F or F@T"]), ("0.5@", ["is not none, F or F@T"]),
    ("@3", ["is not none"]),
])
def test_bad_settings_name_the_problem_and_the_fix(text, words):
    with pytest.raises(ConfigError) as err:
        stragglers.parse(text)
    message = str(err.value)
    assert "\n" not in message
    for word in words:
        assert word in message, message


def test_lists_are_canonical_and_without_duplicates():
    assert stragglers.parse_list("none, 0.50,0.5@0,0.5@30,NONE") == ["none", "0.5", "0.5@30"]
    with pytest.raises(ConfigError, match="empty list"):
        stragglers.parse_list(" , ")


def test_the_grid_crosses_stragglers_with_every_other_setting():
    cells = grid.expand(engines=["torch"], models=["lenet-mlp"], layers=[None], batches=[32],
                        devices=[1, 4], syncs=["sync", "async"],
                        stragglers=["none", "0.5", "0.50@0", "0.5@30"])
    # One device collapses sync/async (one cell); a straggler there slows its only node.
    assert [(c.devices, c.sync, c.straggler) for c in cells] == [
        (1, "sync", "none"), (1, "sync", "0.5"), (1, "sync", "0.5@30"),
        (4, "sync", "none"), (4, "sync", "0.5"), (4, "sync", "0.5@30"),
        (4, "async", "none"), (4, "async", "0.5"), (4, "async", "0.5@30")]
    assert len({c.cell_id for c in cells}) == len(cells)
    assert CellConfig().straggler == "none"
    with pytest.raises(ConfigError, match="--straggler 2"):
        grid.validate(CellConfig(straggler="2"))


def test_only_clusters_that_can_slow_a_node_take_a_straggler():
    cells = [CellConfig(straggler="none"), CellConfig(straggler="0.5@10")]
    with pytest.raises(ConfigError) as err:
        cluster_settings("local").check(grid_needs(cells))
    # The providers able to slow a node, named from the registry.
    assert "--straggler 0.5@10" in str(err.value) and \
        "use --cluster emulated or inventory" in str(err.value)
    cluster_settings("local").check(grid_needs(cells[:1]))
    assert {name for name, settings in PROVIDERS.items()
            if settings.cluster_type().can_slow_node} == {"emulated", "inventory"}


def _specs(*nodes_roles):
    return [ProcessSpec(role, rank, Node(name, profile=profile), ["true"])
            for rank, (name, role, profile) in enumerate(nodes_roles)]


def test_the_straggler_is_the_node_of_the_last_worker_and_profiles_are_recorded():
    specs = _specs(("n0", "scheduler", "pi4"), ("n0", "server", "pi4"),
                   ("n1", "worker", "pi4"), ("n2", "worker", "pi3b"))
    assert stragglers.straggler_node(specs).name == "n2"
    assert stragglers.straggler_node(_specs(("n0", "worker", "pi3b"))).name == "n0"
    assert stragglers.straggler_node(_specs(("n0", "server", "pi3b"))) is None
    nodes = [spec.node for spec in specs[1:]]
    assert stragglers.node_profiles(nodes) == {"n0": "pi4", "n1": "pi4", "n2": "pi3b"}
    assert stragglers.node_profiles([Node("local0"), Node("local1")]) is None


class RecordingCluster(Cluster):
    """Stands in for a provider: records when each node was slowed and restored."""

    name = "recording"
    can_slow_node = True

    def __init__(self, fail_slow: bool = False, fail_restore: bool = False):
        self.calls: list[tuple[str, str, float, dict]] = []
        self.fail_slow, self.fail_restore = fail_slow, fail_restore

    def slow_node(self, node, factor, **kw):
        self.calls.append(("slow", node.name, time.monotonic(), {"factor": factor, **kw}))
        if self.fail_slow:
            raise ClusterError("the node went away")

    def restore_node(self, node, **kw):
        self.calls.append(("restore", node.name, time.monotonic(), kw))
        if self.fail_restore:
            raise ClusterError("no answer")


SPECS = _specs(("n0", "server", "pi3b"), ("n1", "worker", "pi3b"), ("n2", "worker", "pi3b"),
               ("n2", "server", "pi3b"))


def _straggler(setting: str, cluster) -> Straggler:
    return Straggler(CellConfig(straggler=setting), cluster)


def test_from_the_start_the_node_is_slowed_before_start_returns_and_restored_once(tmp_path):
    cluster = RecordingCluster()
    straggler = _straggler("0.5", cluster)
    t_launch = time.monotonic()
    straggler.start(SPECS, t_launch, cell_dir=tmp_path, threads=2)
    assert [c[:2] for c in cluster.calls] == [("slow", "n2")]
    # The node's processes (a worker and a server) and their threads, for real nodes.
    assert cluster.calls[0][3] == {"factor": 0.5, "cell_dir": tmp_path, "processes": 2,
                                   "threads": 2}
    straggler.stop()
    straggler.stop()  # a second stop (the runner's finally after an error) does nothing
    assert [c[:2] for c in cluster.calls] == [("slow", "n2"), ("restore", "n2")]
    record = {"status": "ok", "reason": ""}
    straggler.finish(record, [s.node for s in SPECS])
    assert record["straggler_node"] == "n2" and record["straggler_factor"] == 0.5
    assert record["straggler_after_s"] == 0 and 0 <= record["straggler_started_s"] < 0.5
    assert record["status"] == "ok" and record["node_profiles"] == {
        "n0": "pi3b", "n1": "pi3b", "n2": "pi3b"}


def _wait_for_a_call(cluster: RecordingCluster, timeout_s: float = 10.0) -> None:
    """Until the straggler's timer thread has called the cluster: a loaded host may run
    it well after T, and a fixed sleep then stopped the straggler before it did."""
    deadline = time.monotonic() + timeout_s
    while not cluster.calls and time.monotonic() < deadline:
        time.sleep(0.01)


def test_after_t_the_node_is_slowed_only_after_t(tmp_path):
    cluster = RecordingCluster()
    straggler = _straggler("0.5@0.4", cluster)
    t_launch = time.monotonic()
    straggler.start(SPECS, t_launch, cell_dir=tmp_path)
    time.sleep(0.2)
    early, early_s = list(cluster.calls), time.monotonic() - t_launch
    assert early == [] or early_s >= 0.4, early  # this thread may wake past T
    _wait_for_a_call(cluster)
    straggler.stop()
    (slow, node, when, _), restore = cluster.calls
    assert (slow, node, restore[0]) == ("slow", "n2", "restore")
    assert when - t_launch >= 0.4
    assert straggler.started_s >= 0.4


def test_a_cell_that_ends_before_t_never_runs_slowed(tmp_path):
    cluster = RecordingCluster()
    straggler = _straggler("0.5@30", cluster)
    straggler.start(SPECS, time.monotonic(), cell_dir=tmp_path)
    started = time.monotonic()
    straggler.stop()
    assert time.monotonic() - started < 0.5  # the timer is cancelled, not waited for
    assert cluster.calls == []
    record = {"status": "ok", "reason": ""}
    straggler.finish(record, [])
    assert record["straggler_node"] == "n2" and record["straggler_started_s"] is None
    assert record["status"] == "ok"


def test_a_slowing_that_fails_at_t_fails_the_cell_and_the_node_is_restored(tmp_path):
    cluster = RecordingCluster(fail_slow=True)
    straggler = _straggler("0.5@0.1", cluster)
    straggler.start(SPECS, time.monotonic(), cell_dir=tmp_path)
    _wait_for_a_call(cluster)
    straggler.stop()
    assert [c[0] for c in cluster.calls] == ["slow", "restore"]
    record = {"status": "ok", "reason": ""}
    straggler.finish(record, [])
    assert record["status"] == "failed"
    assert record["reason"] == "straggler: could not slow n2: the node went away"


def test_a_slowing_that_fails_at_the_start_raises_for_the_runner(tmp_path):
    straggler = _straggler("0.5", RecordingCluster(fail_slow=True))
    with pytest.raises(ClusterError, match="went away"):
        straggler.start(SPECS, time.monotonic(), cell_dir=tmp_path)


def test_a_failed_restore_is_named_but_keeps_the_result(tmp_path):
    straggler = _straggler("0.5", RecordingCluster(fail_restore=True))
    straggler.start(SPECS, time.monotonic(), cell_dir=tmp_path)
    straggler.stop()  # never raises: it runs in the runner's finally
    record = {"status": "ok", "reason": "diverged"}
    straggler.finish(record, [])
    assert record["status"] == "ok"
    assert record["reason"] == "diverged; straggler: could not restore n2: no answer"


def test_a_cluster_that_cannot_slow_a_node_is_an_error_and_none_is_a_no_op(tmp_path):
    class Local(Cluster):
        name = "local"

    with pytest.raises(ClusterError, match="the local cluster cannot slow a node"):
        _straggler("0.5", Local()).start(SPECS, time.monotonic(), cell_dir=tmp_path)
    none = _straggler("none", Local())
    none.start(SPECS, time.monotonic(), cell_dir=tmp_path)
    none.stop()
    record = {"status": "ok"}
    none.finish(record, [])
    assert record["straggler_node"] is None and record["straggler_factor"] is None


def test_stop_waits_for_a_slowing_in_progress_then_restores(tmp_path):
    """A slowing at T that is still running (a real node's SSH) when the cell ends is
    finished and then undone, never left behind."""
    gate = threading.Event()

    class Slow(RecordingCluster):
        def slow_node(self, node, factor, **kw):
            gate.set()
            time.sleep(0.3)
            super().slow_node(node, factor, **kw)

    cluster = Slow()
    straggler = _straggler("0.5@0.05", cluster)
    straggler.start(SPECS, time.monotonic(), cell_dir=tmp_path)
    assert gate.wait(2)
    straggler.stop()
    assert [c[0] for c in cluster.calls] == ["slow", "restore"]


@pytest.mark.parametrize("version", [1, 2])
def test_the_quota_in_force_is_read_back(tmp_path, version):
    group = NodeCgroup(version, tmp_path, tmp_path, tmp_path)
    group.set_cpu(0.3)
    assert group.cpu_quota_us() == cfs_quota_us(0.3) == (1000, 3334)
    assert group.has_cpu(0.3) and not group.has_cpu(0.15)
    group.set_cpu(0.15)
    assert group.has_cpu(0.15)
    if version == 1:
        (tmp_path / "cpu.cfs_quota_us").write_text("-1\n")
    else:
        (tmp_path / "cpu.max").write_text("max 100000\n")
    assert group.cpu_quota_us() is None and not group.has_cpu(0.15)


# --- real nodes (inventory): the command run on the node, against a v2-like folder ---

def _fake_v2(root: Path) -> Path:
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (root / "cgroup.subtree_control").write_text("memory pids\n")
    return root


def _run_on_node(action: str, group: str, args: list[str], root: Path) -> dict:
    argv = cpu_max_command(sys.executable, action, group, args, root=str(root),
                           elevate=False)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    return straggler_answer("pi3", done.returncode, done.stdout, done.stderr)


def test_real_node_slow_moves_the_cells_processes_and_sets_cpu_max(tmp_path):
    root = _fake_v2(tmp_path / "cgroup")
    # A cell's process on the node with a child of its own, registered like remote_exec.
    parent = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                               "subprocess.Popen(['sleep', '30']); time.sleep(30)"])
    try:
        pids = tmp_path / "pids" / "pi3.json"
        pids.parent.mkdir()
        pids.write_text(json.dumps({"worker": [parent.pid]}))
        time.sleep(0.5)  # the child is started
        answer = _run_on_node("slow", "c1-attempt-1-pi3",
                              ["0.5", "1", "1", str(pids), "5"], root)
    finally:
        parent.kill()
        parent.wait()
    cpus = len(os.sched_getaffinity(0))
    quota = int(round(0.5 * min(cpus, 1) * STRAGGLER_PERIOD_US))
    group = root / "edgeprof-straggler" / "c1-attempt-1-pi3"
    assert (group / "cpu.max").read_text() == f"{quota} {STRAGGLER_PERIOD_US}"
    assert answer["cpu_max"] == f"{quota} {STRAGGLER_PERIOD_US}" and answer["cores"] == 0.5
    assert answer["moved"][0] == parent.pid and len(answer["moved"]) == 2  # and its child
    for folder in (root, root / "edgeprof-straggler"):  # the cpu controller handed down
        assert (folder / "cgroup.subtree_control").read_text() == "+cpu"
    restored = _run_on_node("restore", "c1-attempt-1-pi3", [], root)
    assert (group / "cpu.max").read_text() == f"max {STRAGGLER_PERIOD_US}"
    assert restored["ok"] is True


def test_real_node_slow_gives_up_when_no_process_appears(tmp_path):
    root = _fake_v2(tmp_path / "cgroup")
    with pytest.raises(ClusterError) as err:
        _run_on_node("slow", "g", ["0.5", "2", "1", str(tmp_path / "none.json"), "0.3"], root)
    assert "cannot slow node pi3: none of the cell's 2 process(es)" in str(err.value)


def test_real_node_without_cgroup_v2_is_refused_in_one_line(tmp_path):
    v1 = tmp_path / "cgroup"
    v1.mkdir()  # a v1 host's /sys/fs/cgroup: no cgroup.controllers
    with pytest.raises(ClusterError) as err:
        _run_on_node("slow", "g", ["0.5", "1", "1", str(tmp_path / "p.json"), "1"], v1)
    assert "node pi3 has no cgroup v2 with the cpu controller" in str(err.value)
    assert "drop --straggler" in str(err.value)
    # Restoring on such a node has nothing to undo.
    assert _run_on_node("restore", "g", [], v1)["ok"] is True


def test_real_node_commands_run_as_root_through_sudo_and_name_a_refusal():
    argv = cpu_max_command("/opt/edgeprof/venv/bin/python", "slow", "g", ["0.5"])
    assert argv[:2] == ["sh", "-c"] and "sudo -n" in argv[2] and 'id -u' in argv[2]
    assert argv[4:7] == ["/opt/edgeprof/venv/bin/python", "-c", argv[6]]
    assert argv[7:] == ["slow", "/sys/fs/cgroup", "g", "0.5"]
    with pytest.raises(ClusterError) as err:
        straggler_answer("pi3", 1, "", "sudo: a password is required\n")
    assert "sudo: a password is required" in str(err.value)
    assert "passwordless sudo" in str(err.value)


def test_hosts_without_cgroup_v2_are_refused_before_a_straggler_sweep():
    from profiler import __version__

    hosts = [Host("pi0", "10.0.0.1"), Host("pi1", "10.0.0.2"), Host("pi2", "10.0.0.3")]
    answers = {h.name: {"version": __version__, "engines": {"torch": {"ok": True}},
                        "cgroup_v2_cpu": True} for h in hosts}
    answers["pi2"]["cgroup_v2_cpu"] = False
    slowed = CellConfig(engine="torch", model="lenet-mlp", layers=None, devices=2,
                        straggler="0.5")
    with pytest.raises(ClusterError) as err:
        check_hosts(hosts, grid_needs([slowed]), answers)
    assert "host pi2 has no cgroup v2" in str(err.value) and "--straggler" in str(err.value)
    # Without a straggler, or when the cells do not reach pi2: nothing to refuse.
    check_hosts(hosts, grid_needs([CellConfig(engine="torch", model="lenet-mlp", layers=None,
                                              devices=2)]), answers)
    check_hosts(hosts, grid_needs([CellConfig(engine="torch", model="lenet-mlp", layers=None,
                                              devices=1, straggler="0.5")]), answers)


# --- throttling on a Pi: get_throttled words as the agent samples them ---

UNDER_VOLTAGE, FREQ_CAPPED, THROTTLED = 1 << 0, 1 << 1, 1 << 2
UNDER_VOLTAGE_OCCURRED, THROTTLED_OCCURRED = 1 << 16, 1 << 18


@pytest.mark.parametrize("samples, expected", [
    ([(0, 0), (1500, 0), (2500, 0)], []),
    ([(0, 0), (1500, THROTTLED | THROTTLED_OCCURRED)], ["throttled"]),
    # Throttled and recovered between two readings: only the sticky bit tells.
    ([(0, 0), (1500, THROTTLED_OCCURRED)], ["throttled"]),
    # Sticky since before the cell (a brown-out at boot): not this cell's.
    ([(0, UNDER_VOLTAGE_OCCURRED), (1500, UNDER_VOLTAGE_OCCURRED)], []),
    ([(0, 0), (1500, UNDER_VOLTAGE | UNDER_VOLTAGE_OCCURRED | FREQ_CAPPED)],
     ["under_voltage", "freq_capped"]),
    # After the window: not counted; no baseline: only current bits count.
    ([(0, 0), (1500, 0), (4000, THROTTLED)], []),
    ([(1500, THROTTLED_OCCURRED)], []),
    # A window shorter than the sampling: the first sample after it covers it.
    ([(0, 0), (3500, THROTTLED)], ["throttled"]),
])
def test_throttling_during_the_window(samples, expected):
    assert throttled_during(samples, 1000, 3000) == expected


def test_the_printed_table_names_the_straggler_only_in_sweeps_that_slow_one():
    from profiler.sweep.table import format_table

    base = {"model": "lenet-mlp", "batch": 32, "devices": 4, "sync": "sync",
            "engine": "torch", "status": "ok", "val_accuracy": 0.9, "diverged": False}
    plain = format_table([{**base, "straggler": "none"}])
    assert "straggler" not in plain
    table = format_table([{**base, "straggler": "none"},
                          {**base, "straggler": "0.5@30", "straggler_node": "n4",
                           "diverged": True}]).splitlines()
    assert table[0].split()[6:8] == ["straggler", "status"]
    assert table[2].split()[6] == "none"
    assert table[3].split()[6:9] == ["n4", "0.5@30", "ok,diverged"]
    assert "0.900!" in table[3]
