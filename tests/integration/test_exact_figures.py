"""Peaks from the kernel, with real processes (issue 48): what no sampling interval can
miss. A spike allocated and freed between two of the agent's ticks is in ``rss_mb_peak``
(VmHWM) and in a cgroup node's ``node_mem_peak_mb`` (memory.max_usage_in_bytes); a local
cell shorter than one interval reports its worker's own peak (its VmHWM), and an
emulated node's cgroup peak reaches results.
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

from profiler.metrics.summary import summarize_cell
from tests.conftest import ROOT, need_binary, need_root
from tests.integration.test_agent_process import _agent, _cgroup, _wait_points

pytestmark = pytest.mark.integration

SPIKE_MIB = 200
# Waits for "go", allocates SPIKE_MIB touching every page, frees it at once, says its
# own peak (VmHWM, KiB: not ru_maxrss, which Linux keeps across exec and so holds the
# launching test process's memory too) and the window's ends, then lives on for the
# agent's next tick, which sees its RSS back down.
SPIKER = f"""
import sys, time
sys.stdin.readline()
t0 = time.time()
block = bytearray({SPIKE_MIB} * 2**20)
block[::4096] = b'1' * (len(block) // 4096)
del block
t1 = time.time()
hwm = next(line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM:'))
print(hwm, t0, t1, flush=True)
sys.stdin.readline()
"""


def _tick_times(spool: Path, measurement: str) -> list[int]:
    from profiler.agent.spool_reader import read_points
    return [p.time_ms for _, p in read_points(spool) if p.measurement == measurement]


def _spike_between_ticks(tmp_path: Path, *agent_args: str, pre_go=None):
    """A spiker sampled once, spiking right after a tick and freeing before the next:
    (its maxrss MB, window start, window end, the spool); the agent is stopped."""
    spiker = subprocess.Popen([sys.executable, "-c", SPIKER], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    agent = None
    try:
        if pre_go:
            pre_go(spiker.pid)
        pids = tmp_path / "pids.json"
        pids.write_text(json.dumps({"worker": [spiker.pid]}))
        spool = tmp_path / "spool"
        agent = _agent(tmp_path, spool, "--pids-file", str(pids), *agent_args)
        # Interval 1 s (the last --interval wins): spike just after a tick.
        _wait_points(spool, lambda ps: sum(p.measurement == "proc" for p in ps) >= 2)
        last = _tick_times(spool, "proc")[-1]
        while _tick_times(spool, "proc")[-1] == last:
            time.sleep(0.02)
        spiker.stdin.write("go\n")
        spiker.stdin.flush()
        maxrss_kib, t0, t1 = spiker.stdout.readline().split()
        after = _tick_times(spool, "proc")[-1]
        _wait_points(spool, lambda ps: _tick_times(spool, "proc")[-1] > after + 10)
        return int(maxrss_kib) / 1024, float(t0), float(t1), spool, after
    finally:
        if agent is not None:
            os.killpg(agent.pid, signal.SIGTERM)
            agent.wait(timeout=10)
        spiker.kill()
        spiker.wait()


def test_a_spike_between_two_ticks_is_in_the_peak(tmp_path):
    maxrss_mb, t0, t1, spool, tick_before = _spike_between_ticks(
        tmp_path, "--interval", "1")
    assert (t1 - t0) < 0.9, "the spike must fit between two ticks"
    cell = tmp_path / "cell"
    (cell / "metrics").mkdir(parents=True)
    (cell / "metrics" / "n1").symlink_to(spool)
    row = summarize_cell(cell, ["n1"], t0, t1)
    from profiler.agent.spool_reader import read_points
    sampled = [p.fields["rss_mb"] for _, p in read_points(spool) if p.measurement == "proc"]
    assert max(sampled) < maxrss_mb - SPIKE_MIB / 2, "a tick saw the spike: retry"
    # Within 5% of the process's own high-water mark, with nothing but the agent's spool.
    assert abs(row["rss_mb_peak"] - maxrss_mb) <= 0.05 * maxrss_mb, (row, maxrss_mb)
    assert row["rss_mb_peak"] >= SPIKE_MIB
    assert row["samples_in_window"] == 1 and row["sampled_figures_thin"] is True


def test_a_cgroup_nodes_spike_is_in_its_peak(tmp_path):
    need_root()
    name = f"edgeprof-exact-test-{os.getpid()}"
    mem_dir = _cgroup("memory", name)
    # Charge an earlier "cell" to the reused cgroup: the agent's reset must drop it.
    old = subprocess.run([sys.executable, "-c", "import os,sys\n"
                          f"open('{mem_dir}/cgroup.procs','w').write(str(os.getpid()))\n"
                          "b = bytearray(300 * 2**20); b[::4096] = b'1' * (len(b) // 4096)"],
                         check=True)
    assert old.returncode == 0
    try:
        def join(pid):
            (mem_dir / "cgroup.procs").write_text(str(pid))
        maxrss_mb, t0, t1, spool, _ = _spike_between_ticks(
            tmp_path, "--interval", "1", "--cgroup-memory", str(mem_dir), "--memory-mb",
            "1024", pre_go=join)
        cell = tmp_path / "cell"
        (cell / "metrics").mkdir(parents=True)
        (cell / "metrics" / "n1").symlink_to(spool)
        row = summarize_cell(cell, ["n1"], t0, t1)
        assert row["mem_used_mb_peak"] < SPIKE_MIB / 2  # the samples missed it
        # The cgroup's mark holds the spike (the process's whole peak, a little cache
        # besides), not the 300 MB of the earlier process.
        assert SPIKE_MIB <= row["node_mem_peak_mb"] <= maxrss_mb * 1.05 + 10, row
    finally:
        for _ in range(50):
            try:
                mem_dir.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def test_a_local_cell_shorter_than_the_interval_reports_its_workers_peak(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "profiler.cli", "sweep", "--model", "lenet-mlp", "--batch",
         "64", "--devices", "1", "--max-samples", "512", "--val-samples", "64",
         "--epochs", "1", "--interval", "10", "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((out / "results.jsonl").read_text().splitlines()[-1])
    assert record["status"] == "ok", record["reason"]
    cell_dir = out / "cells" / record["cell_id"] / f"attempt-{record['attempt']}"
    end = [json.loads(line) for line in (cell_dir / "events" / "worker-0.jsonl")
           .read_text().splitlines() if '"end"' in line][-1]
    assert end["maxrss_mb"] > 100  # MXNet imported and trained
    assert abs(record["rss_mb_peak"] - end["maxrss_mb"]) <= 0.05 * end["maxrss_mb"], (
        record["rss_mb_peak"], end["maxrss_mb"])
    assert record["samples_in_window"] <= 2 and record["sampled_figures_thin"] is True
    assert "mem_peak_MB" in done.stdout and "--interval 0.2" in done.stdout


@pytest.mark.timeout(400)
def test_an_emulated_nodes_cgroup_peak_reaches_results(tmp_path):
    need_root()
    for binary in ("ip", "tc", "ethtool", "sysctl", "nsenter"):
        need_binary(binary)
    from profiler.cluster import emulated
    emulated.down()
    out = tmp_path / "out"
    try:
        done = subprocess.run(
            [sys.executable, "-m", "profiler.cli", "sweep", "--cluster", "emulated",
             "--profile", "pi3b", "--model", "lenet-mlp", "--batch", "64", "--devices", "1",
             "--max-samples", "256", "--val-samples", "64", "--epochs", "1",
             "--interval", "0.5", "--out", str(out)],
            capture_output=True, text=True, timeout=360, cwd=ROOT)
    finally:
        emulated.down()
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((out / "results.jsonl").read_text().splitlines()[-1])
    assert record["status"] == "ok", record["reason"]
    # The node's cgroup mark, read each tick, is at least what its samples saw.
    assert record["node_mem_peak_mb"] is not None
    assert record["node_mem_peak_mb"] >= record["mem_used_mb_peak"] > 0, record
    assert record["rss_mb_peak"] >= record["rss_mb_mean"] > 0
    # The worker's peak, within 5% of its own high-water mark, on an emulated node too.
    cell_dir = out / "cells" / record["cell_id"] / f"attempt-{record['attempt']}"
    end = [json.loads(line) for line in (cell_dir / "events" / "worker-0.jsonl")
           .read_text().splitlines() if '"end"' in line][-1]
    assert abs(record["rss_mb_peak"] - end["maxrss_mb"]) <= 0.05 * end["maxrss_mb"], (
        record["rss_mb_peak"], end["maxrss_mb"])
