"""Faults on the emulated cluster: a cut link, out of memory (issue 8's fault-injection suite).

Real sweeps (``edgeprof sweep --cluster emulated``) with MXNet's scheduler, server and
workers in the nodes' network namespaces. A link is cut as a cable is pulled at the switch:
``ip link set edgeprof-n1h down`` on the host end of n1's veth (the bridge port). The node's
``eth0`` then loses carrier but keeps its address and route, so its sockets see no error,
only silence, until ``ip link set ... up`` plugs it back (the ``tbf`` shaping survives).
Memory runs out against one node's real cgroup limit, in a mixed cluster (one small node)
added through ``$EDGEPROF_PROFILES``. Needs root, like every emulated-cluster test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, need_binary, need_root

IDLE_WAIT_S = 180  # how long to wait for another sweep's busy cluster before giving up

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300 + IDLE_WAIT_S)]

# A 2-device dist_sync LeNet-MLP cell on 3 pi4 nodes (n0: scheduler + server, n1 and
# n2: workers): launch to end ~10 s at batch 32 (7 s of it training, 2 epochs of 8192
# samples), ~5 s at batch 64 (measured here, on an idle 2-core host). Pi 4 quotas, not
# Pi 3B's: what is tested is the cut, and the Pi 3B's start-up (~10 s) and epochs
# (~9 s) only made the tests wait.
LENET_2_DEVICES = ("--profile", "pi4", "--model", "lenet-mlp", "--devices", "2",
                   "--max-samples", "8192", "--val-samples", "64", "--epochs", "2")
CUT_NODE = "n1"  # worker 1's node
POLL_S = 0.1


@pytest.fixture
def no_cluster(tmp_path):
    """No emulated cluster before the test, nothing of this test's left after it.

    A cluster busy with someone else's processes (another sweep on a shared host) is
    waited for, never pulled from under them; one still holding this test's processes
    (they mention ``tmp_path``) is taken down.
    """
    need_root()
    for binary in ("ip", "tc", "ethtool", "sysctl", "nsenter"):
        need_binary(binary)
    from profiler.cluster import emulated
    deadline = time.monotonic() + IDLE_WAIT_S
    while _cluster_processes():
        if time.monotonic() > deadline:
            pytest.fail(f"an emulated cluster stayed busy for {IDLE_WAIT_S} s: "
                        f"{_cluster_processes()[:5]}")
        time.sleep(1.0)
    emulated.down()
    try:
        yield emulated
    finally:
        running = _cluster_processes()
        if not running or any(str(tmp_path) in cmdline for cmdline in running):
            emulated.down()


def _cluster_processes() -> list[str]:
    """The command lines of every process in an edgeprof node namespace."""
    import psutil
    from profiler.cluster import netns
    found = []
    for ns in netns.list_netns():
        for pid in netns.netns_pids(ns):
            try:
                found.append(" ".join(psutil.Process(pid).cmdline()))
            except psutil.NoSuchProcess:
                pass
    return found


class Sweep:
    """``edgeprof sweep --cluster emulated`` running in the background."""

    def __init__(self, out: Path, *args: str, env: dict | None = None):
        self.out = out
        self.log_path = out.parent / f"{out.name}.log"
        self._log = open(self.log_path, "w")
        cmd = [sys.executable, "-m", "profiler.cli", "sweep", "--cluster", "emulated",
               "--interval", "0.5", "--out", str(out), *args]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=self._log,
                                     stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {})})

    def records(self) -> list[dict]:
        try:
            text = (self.out / "results.jsonl").read_text()
        except FileNotFoundError:
            return []
        # Only whole lines: the sweep may be writing the next one.
        return [json.loads(line) for line in text.splitlines(keepends=True)
                if line.endswith("\n")]

    def attempt_dir(self, batch: int) -> Path | None:
        for cell_json in self.out.glob("cells/*/attempt-1/cell.json"):
            if json.loads(cell_json.read_text())["batch"] == batch:
                return cell_json.parent
        return None

    def wait(self, timeout_s: float) -> tuple[int, str]:
        try:
            code = self.proc.wait(timeout=timeout_s)
        finally:
            self.kill()
        return code, self.log_tail()

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def kill(self) -> None:
        """Stop a sweep the test gave up on as a user would (Ctrl-C), then for sure."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def _wait_for(what: str, check, timeout_s: float, sweep: Sweep):
    """Poll ``check()`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        if sweep.proc.poll() is not None:
            found = check()
            if found:
                return found
            pytest.fail(f"the sweep exited ({sweep.proc.returncode}) before {what}: "
                        f"{sweep.log_tail()}")
        time.sleep(POLL_S)
    pytest.fail(f"no {what} within {timeout_s:g} s")


def _events(attempt: Path, rank: int = 0) -> list[str]:
    from workloads.events import read_events
    return [e["event"] for e in read_events(attempt / "events" / f"worker-{rank}.jsonl")]


def _first_step(sweep: Sweep, batch: int) -> Path | None:
    attempt = sweep.attempt_dir(batch)
    return attempt if attempt and "first_step" in _events(attempt) else None


class Cable:
    """The host end of a node's veth, i.e. its port on the bridge; ``plug()`` is idempotent."""

    def __init__(self, node: str):
        from profiler.cluster import netns
        self.device = netns.host_veth_name(node)
        self.node_ns = netns.netns_name(node)

    def _set(self, state: str) -> None:
        subprocess.run(["ip", "link", "set", self.device, state], check=True, timeout=30)

    def pull(self) -> float:
        self._set("down")
        # The node side loses carrier: nothing gets through either way.
        shown = subprocess.run(["ip", "-n", self.node_ns, "link", "show", "eth0"],
                               capture_output=True, text=True, check=True).stdout
        assert "NO-CARRIER" in shown, shown
        return time.monotonic()

    def is_pulled(self) -> bool:
        return Path(f"/sys/class/net/{self.device}/operstate").read_text().strip() == "down"

    def shaped(self) -> bool:
        """Whether the port still has its ``tbf`` (a down/up must not unshape the link)."""
        shown = subprocess.run(["tc", "qdisc", "show", "dev", self.device],
                               capture_output=True, text=True, check=True).stdout
        return " tbf " in shown

    def plug(self) -> float:
        if os.path.exists(f"/sys/class/net/{self.device}"):
            self._set("up")
        return time.monotonic()


def _alive(pid: int, cmd_part: str | None = None) -> bool:
    import psutil
    try:
        proc = psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE and (
            cmd_part is None or cmd_part in " ".join(proc.cmdline()))
    except psutil.NoSuchProcess:
        return False


def _processes_mentioning(text: str) -> list[str]:
    import psutil
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if text in cmdline and proc.pid != os.getpid():
            found.append(f"{proc.pid}: {cmdline[:200]}")
    return found


def _cell_pids(attempt: Path) -> list[int]:
    """Every pid the runner started for the cell's roles (``pids/<node>.json``)."""
    pids = []
    for path in attempt.glob("pids/*.json"):
        for role_pids in json.loads(path.read_text()).values():
            pids += role_pids
    return pids


def test_a_link_cut_past_the_timeout_is_a_timeout_and_the_next_cell_runs(no_cluster, tmp_path):
    """Worker 1's cable pulled mid-training, for longer than the cell may run: ``timeout``.

    Real: a 2-device ``dist_sync`` LeNet-MLP cell on 3 emulated pi4 nodes, n1's bridge
    port set down (``ip link set edgeprof-n1h down``) once worker 0 has taken its first
    step, and plugged back only when the sweep has written the cell's record. The cell
    would finish in ~10 s; cut, it must be stopped at ``--timeout`` (not hang past it),
    recorded ``timeout``, with every one of its processes (scheduler, server, workers,
    agents) gone before the next cell starts. The second cell of the grid (batch 64) then
    runs ``ok`` on the same nodes, and the sweep exits 0: a timeout is a result.
    """
    # Past the cut cell's first step (~3 s from launch) and the next cell's whole run
    # (5 s measured alone), with room for a loaded host.
    timeout_s = 25.0
    out = tmp_path / "out"
    cable = Cable(CUT_NODE)
    sweep = Sweep(out, *LENET_2_DEVICES, "--batch", "32,64", "--timeout", f"{timeout_s:g}")
    try:
        attempt = _wait_for("first training step of the batch-32 cell",
                            lambda: _first_step(sweep, 32), 150, sweep)
        t_cut = cable.pull()
        assert "end" not in _events(attempt), "the cell finished before the cut"
        _wait_for("record of the cut cell", sweep.records, timeout_s + 60, sweep)
        t_record = time.monotonic()
        assert cable.is_pulled(), "the link came back before the cell's record"
        # Reaped before the record was written: nothing of the cell may still run.
        left = [p for p in _cell_pids(attempt) if _alive(p, "workloads")]
        left += _processes_mentioning(str(attempt))
        cable.plug()
        assert cable.shaped()
        assert _cell_pids(attempt), "the runner recorded no pids for the cell"
        assert not left, f"processes of the timed-out cell outlived its record: {left}"
        code, log = sweep.wait(timeout_s + 120)
    finally:
        cable.plug()
        sweep.kill()
    assert code == 0, log
    records = sweep.records()
    print("cut held", round(t_record - t_cut, 1), "s;",
          [(r["batch"], r["status"], r["reason"], r["elapsed_s"]) for r in records])
    assert [(r["batch"], r["status"]) for r in records] == [(32, "timeout"), (64, "ok")], \
        [r["reason"] for r in records]
    cut = records[0]
    assert f"--timeout {timeout_s:g}" in cut["reason"]
    # Stopped at its limit, not long after it: ~2 s of SIGTERM grace and reaping.
    took = cut["reaped_at"] - cut["launched_at"]
    assert timeout_s <= took <= timeout_s + 15, took
    assert "end" not in _events(attempt) and "end" not in _events(attempt, 1)
    assert records[1]["val_accuracy"] is not None
    assert not _processes_mentioning(str(out)), "processes of the sweep outlived it"


def test_a_link_cut_shorter_than_the_timeout_lets_the_cell_finish_ok(no_cluster, tmp_path):
    """Worker 1's cable pulled for 3 s mid-training, well within the timeout: ``ok``.

    Real: the same 2-device ``dist_sync`` LeNet-MLP cell on 3 emulated pi4 nodes, n1's
    bridge port down for 3 s from worker 0's first step, with ``--timeout 180``.
    TCP retransmits across the gap; the cell trains on, ends after the link is back, and
    is recorded ``ok`` with every epoch done on both workers.
    """
    out = tmp_path / "out"
    cable = Cable(CUT_NODE)
    sweep = Sweep(out, *LENET_2_DEVICES, "--batch", "32", "--timeout", "180")
    try:
        attempt = _wait_for("first training step", lambda: _first_step(sweep, 32), 150, sweep)
        # Pulled at once: the 255 steps a worker still to go took 4.5 s here (train_s
        # 7.6 s with the 3 s cut), 1.1 s on a host 4 x as fast, >10 x the 0.1 s poll. A
        # second later, as before, that host would have had the cell all but ended.
        cable.pull()
        t_pulled = time.time()
        assert "end" not in _events(attempt), "the cell finished before the cut"
        time.sleep(3.0)
        cable.plug()
        t_plugged = time.time()
        assert cable.shaped()
        code, log = sweep.wait(240)
    finally:
        cable.plug()
        sweep.kill()
    assert code == 0, log
    (record,) = sweep.records()
    print("cut", round(t_plugged - t_pulled, 1), "s;", record["status"], record["reason"],
          "elapsed", record["elapsed_s"], "train", record["train_s"])
    assert record["status"] == "ok", record["reason"]
    from workloads.events import read_events
    for rank in (0, 1):
        events = read_events(attempt / "events" / f"worker-{rank}.jsonl")
        assert [e["epoch"] for e in events if e["event"] == "epoch"] == [1, 2]
        # Training spanned the cut: it was really mid-training.
        (end,) = [e for e in events if e["event"] == "end"]
        assert end["t"] > t_plugged
    assert not _processes_mentioning(str(out))


@pytest.mark.parametrize("engine", ["mxnet", "torch"])
def test_out_of_memory_on_a_worker_node_is_oom_and_the_next_cell_runs(no_cluster, tmp_path,
                                                                       engine):
    """One node's memory limit kills its worker mid-cell: ``oom`` at once; the next cell runs.

    Real: a mixed cluster added through ``$EDGEPROF_PROFILES`` as a user adds one: n1 a
    400 MB node, n0 and n2 roomy (2 GB). A 2-device ``dist_sync`` ResNet-20 cell at
    batch 512 (~1.1 GB per worker) has its worker on n1 killed by the kernel's OOM killer
    against n1's cgroup limit, while the worker on n2 lives on, waiting in ``dist_sync``
    for a gradient that never comes: the runner must stop the cell then (not at its
    timeout) and record ``oom``. A 2-device LeNet-MLP cell then runs ``ok`` on the same
    nodes: statuses ``["oom", "ok"]``.
    """
    timeout_s = 180
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(
        "profiles:\n"
        "  smallpi: {link_mbit: 100, memory_mb: 400, cpu_cores: 0.5}\n"
        "  roomypi: {link_mbit: 100, memory_mb: 2048, cpu_cores: 0.5}\n"
        "mixes:\n"
        "  small-n1:\n"
        "    nodes: [{profile: roomypi, count: 1}, {profile: smallpi, count: 1},\n"
        "            {profile: roomypi, count: 1}]\n")
    out = tmp_path / "out"
    sweep = Sweep(out, "--profile", "small-n1", "--model", "resnet,lenet-mlp", "--layers", "20",
                  "--batch", "512", "--devices", "2", "--max-samples", "2048",
                  "--val-samples", "64", "--timeout", str(timeout_s), "--engine", engine,
                  env={"EDGEPROF_PROFILES": str(profiles)})
    try:
        code, log = sweep.wait(280)
    finally:
        sweep.kill()
    assert code == 0, log
    records = sweep.records()
    print([(r["model"], r["status"], r["reason"], r["elapsed_s"],
            round(r["reaped_at"] - r["launched_at"], 1)) for r in records])
    assert [(r["model"], r["status"]) for r in records] == [("resnet", "oom"),
                                                            ("lenet-mlp", "ok")], \
        [r["reason"] for r in records]
    oom = records[0]
    assert "1 process" in oom["reason"], oom["reason"]  # n1's worker only, not n2's
    assert oom["reaped_at"] - oom["launched_at"] < timeout_s / 2
    # Summarized up to the reaping although no worker ended: the memory that ran out shows.
    assert oom["mem_used_mb_peak"] is not None and oom["mem_used_mb_peak"] > 200, oom
    assert not _processes_mentioning(str(out))
