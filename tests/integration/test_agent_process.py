"""The agent as a real process: role metrics with descendants, SIGTERM, kill -9, cgroups."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from profiler.agent.spool import segments
from profiler.agent.spool_reader import read_points
from tests.conftest import need, need_root

pytestmark = pytest.mark.integration

# A "launcher" that spawns a CPU-burning child, as horovodrun spawns its workers.
BURNER = ("import subprocess, sys, time\n"
          "child = subprocess.Popen([sys.executable, '-c', 'while True: pass'])\n"
          "time.sleep(60)\n")


def _agent(tmp_path: Path, spool: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "profiler.agent", "--node", "n1", "--spool", str(spool),
         "--interval", "0.1", "--interfaces", "lo", "--tag", "sweep=s1", "--tag", "cell=c1",
         *extra],
        stdout=open(tmp_path / "agent.log", "ab"), stderr=subprocess.STDOUT,
        start_new_session=True)


def _wait_points(spool: Path, predicate, timeout_s: float = 15.0) -> list:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        points = [p for _, p in read_points(spool)]
        if predicate(points):
            return points
        time.sleep(0.1)
    raise AssertionError(f"spool {spool} never satisfied the condition")


@pytest.fixture
def burner():
    proc = subprocess.Popen([sys.executable, "-c", BURNER], start_new_session=True)
    yield proc
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_roles_descendants_sigterm_and_kill9(tmp_path, burner):
    spool = tmp_path / "spool"
    pids = tmp_path / "pids.json"
    pids.write_text(json.dumps({}))
    agent = _agent(tmp_path, spool, "--pids-file", str(pids))
    try:
        _wait_points(spool, lambda ps: any(p.tags.get("role") == "none" for p in ps))
        # The runner rewrites the pids file once processes are up: picked up by mtime.
        tmp = pids.with_suffix(".tmp")
        tmp.write_text(json.dumps({"worker": [burner.pid], "server": []}))
        os.replace(tmp, pids)
        points = _wait_points(spool, lambda ps: sum(
            p.measurement == "proc" and p.fields["cpu_percent"] > 50 for p in ps) >= 3)
        procs = [p for p in points if p.measurement == "proc"]
        assert {p.tags["proc"] for p in procs} == {"worker-0"}
        assert max(p.fields["num_procs"] for p in procs) == 2  # launcher + its child
        node_level = [p for p in points if p.measurement == "cpu"]
        assert node_level[-1].tags["role"] == "worker"
        assert {"cpu", "cpu_core", "mem", "net", "load", "agent"} <= {
            p.measurement for p in points}

        # kill -9: everything already in the spool stays; a restart appends after it.
        os.killpg(agent.pid, signal.SIGKILL)
        agent.wait()
        before = [p for _, p in read_points(spool)]
        agent = _agent(tmp_path, spool, "--pids-file", str(pids))
        _wait_points(spool, lambda ps: len(ps) > len(before) + 20)
        started = time.monotonic()
        os.killpg(agent.pid, signal.SIGTERM)
        assert agent.wait(timeout=5) == 0
        assert time.monotonic() - started < 2.0  # within the runner's grace
        after = [p for _, p in read_points(spool)]
        assert after[:len(before)] == before
        assert len(segments(spool)) == 2
        times = [p.time_ms for p in after if p.measurement == "cpu"]
        assert times == sorted(times) and len(set(times)) == len(times)
    finally:
        if agent.poll() is None:
            os.killpg(agent.pid, signal.SIGKILL)
            agent.wait()


def _cgroup(controller: str, name: str) -> Path:
    path = Path("/sys/fs/cgroup") / controller / name
    need(f"cgroup v1 {controller} controller", path.parent.is_dir()
         and (path.parent / "cgroup.procs").exists())
    path.mkdir(exist_ok=True)
    return path


def test_node_cpu_and_memory_from_its_cgroup(tmp_path):
    need_root()
    name = f"edgeprof-agent-test-{os.getpid()}"
    cpu_dir, mem_dir = _cgroup("cpuacct", name), _cgroup("memory", name)
    # 120 MiB, every page touched (calloc'd pages are not charged until then), without
    # a second copy on the way: ``bytearray(b'1' * n)`` held 240 MiB until the bytes
    # were freed, which a loaded host's agent sampled past its first five points.
    # Moved into the cgroups before it allocates, and the agent started once it says so.
    hog = subprocess.Popen([sys.executable, "-c",
                            "import sys\nsys.stdin.readline()\n"
                            "b = bytearray(120 * 2**20)\nb[::4096] = b'1' * (len(b) // 4096)\n"
                            "print('filled', flush=True)\nwhile True: pass"],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    agent = None
    try:
        (cpu_dir / "cgroup.procs").write_text(str(hog.pid))
        (mem_dir / "cgroup.procs").write_text(str(hog.pid))
        hog.stdin.write("go\n")
        hog.stdin.flush()
        assert hog.stdout.readline().strip() == "filled"
        spool = tmp_path / "spool"
        agent = _agent(tmp_path, spool, "--cgroup-cpu", str(cpu_dir), "--cgroup-memory",
                       str(mem_dir), "--cpu-cores", "2", "--memory-mb", "512")
        _wait_points(spool, lambda ps: sum(p.measurement == "cpu" for p in ps) >= 3)
        # What the hog really used meanwhile (a busy machine gives it less than a core).
        hog_info = psutil.Process(hog.pid)
        cpu0, t0 = sum(hog_info.cpu_times()[:2]), time.time()
        time.sleep(2.0)
        cpu1, t1 = sum(hog_info.cpu_times()[:2]), time.time()
        points = [p for _, p in read_points(spool)]
        cpu = [p.fields for p in points if p.measurement == "cpu"
               and t0 * 1000 + 200 <= p.time_ms <= t1 * 1000]
        mem = [p.fields for p in points if p.measurement == "mem"][5:]
        # As a share of the node's 2-core quota.
        expected = 100.0 * (cpu1 - cpu0) / (t1 - t0) / 2
        mean_cpu = sum(f["cpu_percent"] for f in cpu) / len(cpu)
        assert abs(mean_cpu - expected) <= max(5.0, 0.25 * expected), (mean_cpu, expected)
        assert all(f["quota_cores"] == 2.0 for f in cpu)
        assert all(115 <= f["used_mb"] <= 200 and f["total_mb"] == 512 for f in mem), mem[:2]
    finally:
        if agent is not None:
            os.killpg(agent.pid, signal.SIGKILL)
            agent.wait()
        hog.kill()
        hog.wait()
        for path in (cpu_dir, mem_dir):
            for _ in range(50):
                try:
                    path.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)
