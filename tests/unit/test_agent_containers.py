"""An agent beside a cell's containers (``--containers``, the Swarm provider's): it samples
each container's own cgroup, network namespace and processes, found through the node's
/proc and cgroup tree mounted where it runs.

The trees here are files laid out as the kernel lays them out (cgroup v1 as on this
host, v2 seen from a private cgroup namespace), under a root as the agent's container
sees them (Telegraf's ``testcases/<case>/proc`` way); tests/integration/
test_swarm_cluster.py runs the real agent beside real containers.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from profiler.agent.sampler import AgentConfig, Sampler
from profiler.agent.spool_reader import read_points

CID = "2ab53447c59b52569c78bfec38b1e52897d1b196cc2ea46fff991e397475e6f3"
PARENT = "edgeprof3/n1"
MB = 1024 * 1024
HZ = os.sysconf("SC_CLK_TCK")
NET_DEV = ("Inter-|   Receive                                                |  Transmit\n"
           " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets "
           "errs drop fifo colls carrier compressed\n"
           "    lo:     {lo}      2    0    0    0     0          0         0      {lo}       2 "
           "   0    0    0     0       0          0\n"
           "  eth0: {recv}  {recv_p}    0    0    0     0          0         0 {sent}  {sent_p}"
           "    0    0    0     0       0          0\n")


def _process(proc: Path, pid: int, cgroup: str, *, rss_kb: int, ticks: int,
             recv: int = 0, sent: int = 0) -> None:
    """``proc/<pid>``: cgroup, net/dev, status, stat, and no children."""
    base = proc / str(pid)
    (base / "net").mkdir(parents=True, exist_ok=True)
    (base / "task" / str(pid)).mkdir(parents=True, exist_ok=True)
    (base / "task" / str(pid) / "children").write_text("")
    (base / "cgroup").write_text(cgroup)
    (base / "net" / "dev").write_text(NET_DEV.format(lo=999, recv=recv, recv_p=recv // 100,
                                                     sent=sent, sent_p=sent // 100))
    (base / "status").write_text(f"Name:\tpython\nVmHWM:\t{rss_kb} kB\nVmRSS:\t{rss_kb} kB\n"
                                 "Threads:\t4\n")
    # pid (comm) state ppid ... utime(14) stime(15) cutime cstime ... starttime(22)
    fields = ["S", "1"] + ["0"] * 9 + [str(ticks), "0", "0", "0"] + ["0"] * 4 + ["777"]
    (base / "stat").write_text(f"{pid} (python3 (x)) " + " ".join(fields) + "\n")


def _cgroup_v1(root: Path, *, usage_s: float, memory_mb: int, peak_mb: int) -> None:
    cpu = root / "cpuacct" / PARENT / CID
    memory = root / "memory" / PARENT / CID
    cpu.mkdir(parents=True, exist_ok=True)
    memory.mkdir(parents=True, exist_ok=True)
    (cpu / "cpuacct.usage").write_text(f"{int(usage_s * 1e9)}\n")
    (cpu / "cpuacct.stat").write_text(f"user {int(usage_s * HZ)}\nsystem 0\n")
    (memory / "memory.usage_in_bytes").write_text(f"{(memory_mb + 10) * MB}\n")
    (memory / "memory.stat").write_text(f"cache 0\ntotal_inactive_file {10 * MB}\n")
    (memory / "memory.max_usage_in_bytes").write_text(f"{peak_mb * MB}\n")


V1_CGROUP = (f"4:memory:/{PARENT}/{CID}\n2:cpuacct:/{PARENT}/{CID}\n1:cpu:/{PARENT}/{CID}\n"
             f"0::/{PARENT}/{CID}\n")


def _sampler(tmp_path: Path) -> Sampler:
    return Sampler(AgentConfig(
        node="n1", spool_dir=tmp_path / "spool", interval_s=0.1, interfaces=["eth0"],
        cpu_cores=0.5, memory_mb=1024, containers=tmp_path / "containers",
        proc_root=str(tmp_path / "proc"), cgroup_root=str(tmp_path / "cgroup"),
        pids_file=tmp_path / "pids.json"))


def _register(tmp_path: Path, name: str, role: str, cid: str, pid: int) -> None:
    folder = tmp_path / "containers"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.json.tmp").write_text(json.dumps({"role": role, "id": cid,
                                                         "pid": pid}))
    os.replace(folder / f"{name}.json.tmp", folder / f"{name}.json")


def _last(tmp_path: Path, measurement: str) -> dict:
    points = [p for _, p in read_points(tmp_path / "spool") if p.measurement == measurement]
    return points[-1] if points else None


def test_a_container_is_sampled_from_its_cgroup_namespace_and_processes(tmp_path):
    (tmp_path / "proc").mkdir()
    # A pids file naming the agent's own pid: in container mode it is not read (its pids
    # are the controller's), the containers' are.
    (tmp_path / "pids.json").write_text(json.dumps({"worker": [os.getpid()]}))
    sampler = _sampler(tmp_path)
    sampler.tick()  # before the cell's containers: zeros, so the window is bracketed
    sampler.spool.close()
    cpu, net, mem = (_last(tmp_path, m) for m in ("cpu", "net", "mem"))
    assert cpu.tags["role"] == "none" and cpu.fields["busy_s"] == 0.0
    assert isinstance(cpu.fields["busy_s"], float)  # a field's type never changes
    assert (net.tags["interface"], net.fields["sent_bytes"]) == ("eth0", 0)
    assert mem.fields["used_mb"] == 0 and mem.fields["total_mb"] == 1024
    assert _last(tmp_path, "proc") is None

    _process(tmp_path / "proc", 4321, V1_CGROUP, rss_kb=200 * 1024, ticks=3 * HZ,
             recv=5000, sent=7000)
    _cgroup_v1(tmp_path / "cgroup", usage_s=3.0, memory_mb=150, peak_mb=180)
    _register(tmp_path, "edgeprof-abc-n1", "worker", CID, 4321)
    sampler = _sampler(tmp_path)
    sampler.tick()
    _cgroup_v1(tmp_path / "cgroup", usage_s=4.0, memory_mb=160, peak_mb=190)
    _process(tmp_path / "proc", 4321, V1_CGROUP, rss_kb=210 * 1024, ticks=4 * HZ,
             recv=9000, sent=12000)
    sampler.tick()
    sampler.spool.close()
    cpu, net, mem, proc = (_last(tmp_path, m) for m in ("cpu", "net", "mem", "proc"))
    assert cpu.tags["role"] == "worker"
    assert cpu.fields["busy_s"] == 4.0 and cpu.fields["quota_cores"] == 0.5
    assert (net.fields["recv_bytes"], net.fields["sent_bytes"]) == (9000, 12000)
    assert net.fields["sent_bytes_delta"] == 5000  # lo is not counted
    assert mem.fields["used_mb"] == 160 and mem.fields["peak_mb"] == 190
    assert (proc.tags["proc"], proc.tags["role"]) == ("worker-0", "worker")
    assert proc.fields["rss_mb"] == 210 and proc.fields["cpu_s"] == 4.0
    assert proc.fields["num_procs"] == 1

    # The container ends: its cgroup and process go. Its counters stand in the sums.
    import shutil
    shutil.rmtree(tmp_path / "cgroup" / "cpuacct" / PARENT / CID)
    shutil.rmtree(tmp_path / "cgroup" / "memory" / PARENT / CID)
    shutil.rmtree(tmp_path / "proc" / "4321")
    sampler = _sampler(tmp_path)
    sampler.tick()
    sampler.spool.close()
    cpu, net, mem = (_last(tmp_path, m) for m in ("cpu", "net", "mem"))
    # A new agent never saw it running: nothing of it (an agent that did keeps it).
    assert cpu.fields["busy_s"] == 0.0 and mem.fields["used_mb"] == 0


def test_an_ended_container_keeps_its_counters_in_the_node_s_sums(tmp_path):
    import shutil
    _process(tmp_path / "proc", 4321, V1_CGROUP, rss_kb=1024, ticks=HZ, recv=100, sent=300)
    _cgroup_v1(tmp_path / "cgroup", usage_s=2.5, memory_mb=50, peak_mb=60)
    _register(tmp_path, "edgeprof-abc-n1", "worker", CID, 4321)
    sampler = _sampler(tmp_path)
    sampler.tick()
    shutil.rmtree(tmp_path / "cgroup")
    shutil.rmtree(tmp_path / "proc" / "4321")
    sampler.tick()
    sampler.spool.close()
    cpu, net, mem = (_last(tmp_path, m) for m in ("cpu", "net", "mem"))
    assert cpu.fields["busy_s"] == 2.5 and cpu.fields["cpu_percent"] == 0
    assert (net.fields["recv_bytes"], net.fields["sent_bytes"]) == (100, 300)
    assert mem.fields["used_mb"] == 0 and mem.fields["peak_mb"] == 60


def test_a_pid_outside_the_container_is_never_taken_for_it(tmp_path):
    _process(tmp_path / "proc", 555, "4:memory:/user.slice\n2:cpuacct:/user.slice\n",
             rss_kb=1024, ticks=HZ, sent=100)
    _cgroup_v1(tmp_path / "cgroup", usage_s=9.0, memory_mb=50, peak_mb=60)
    _register(tmp_path, "edgeprof-abc-n1", "worker", CID, 555)
    (tmp_path / "containers" / "broken.json").write_text("{not json")
    sampler = _sampler(tmp_path)
    sampler.tick()
    sampler.spool.close()
    cpu = _last(tmp_path, "cpu")
    assert cpu.fields["busy_s"] == 0.0 and cpu.tags["role"] == "none"
    assert _last(tmp_path, "proc") is None


def test_cgroup_v2_seen_from_a_private_namespace_is_found_by_its_id(tmp_path):
    """On a cgroup v2 host a container has its own cgroup namespace: another container's
    path reads ``/../<id>``, and its directory is found in the tree by its id."""
    group = tmp_path / "cgroup" / "system.slice" / f"docker-{CID}.scope"
    group.mkdir(parents=True)
    (group / "cpu.stat").write_text("usage_usec 1500000\nuser_usec 1000000\n"
                                    "system_usec 500000\n")
    (group / "memory.current").write_text(f"{80 * MB}\n")
    (group / "memory.stat").write_text(f"inactive_file {20 * MB}\n")
    _process(tmp_path / "proc", 4321, f"0::/../docker-{CID}.scope\n", rss_kb=1024,
             ticks=HZ)
    _register(tmp_path, "edgeprof-abc-n1", "server", CID, 4321)
    sampler = _sampler(tmp_path)
    sampler.tick()
    sampler.spool.close()
    cpu, mem = _last(tmp_path, "cpu"), _last(tmp_path, "mem")
    assert cpu.fields["busy_s"] == 1.5 and cpu.tags["role"] == "server"
    assert mem.fields["used_mb"] == 60 and "peak_mb" not in mem.fields
