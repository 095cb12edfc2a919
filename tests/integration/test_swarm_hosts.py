"""An emulated cluster spread over two Swarm hosts: emulated boards as containers.

Two "machines" on this host: the two nodes of an emulated cluster of 2 x pi4 (a network
namespace each, with its cgroup share: 0.7 cores, 4 GB), each with a dockerd of its own
(its containers under its cgroup), joined into one Swarm (``tests.support.swarm``). Each
is then labelled a host of two emulated Pi 3 Bs (``edgeprof.boards=2``,
``edgeprof.profile=pi3b``), so the Swarm has four boards, two on each machine
(``profiler.cluster.swarm.boards``). A DDP cell of four workers, one a board, trains on
them; while it does, the test asks each machine's daemon which workers run there and
reads, from the host, each worker container's cgroup (under its machine's share, the
board profile's CPU quota and memory limit) and the qdisc of its link (tbf at the
profile's 100 Mbit, set by the task in its own network namespace).

Needs what test_swarm_cluster.py needs; under CI=true its absence fails.
"""

from __future__ import annotations

import importlib.util
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from profiler.cluster.netns import tbf_rate_mbit
from tests.conftest import ROOT, assert_one_line, need, need_binary, need_root
from tests.support.swarm import OVERLAY_MTU
# dev_image_tar: the session's image root; nothing_left (autouse): after every test, no
# service, network or container of edgeprof's on the Swarm or on any machine.
from tests.integration.test_swarm_cluster import (  # noqa: F401
    IMAGE, _argv, _records, _wait_for, dev_image_tar, nothing_left)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
HOSTS = 2
BOARDS_PER_HOST = 2
BOARD = "pi3b"
# Unbounded work: the cell is stopped once every worker has trained.
ENDLESS = ("--engine", "torch-ddp", "--model", "lenet-mlp", "--batch", "32",
           "--devices", str(HOSTS * BOARDS_PER_HOST), "--epochs", "100000",
           "--max-samples", "256", "--val-samples", "64")


@pytest.fixture(scope="module")
def swarm(tmp_path_factory, dev_image_tar):  # noqa: F811 (the fixture)
    """Two machines in one Swarm, each a host of ``BOARDS_PER_HOST`` emulated boards."""
    from profiler.cluster import emulated
    from tests.support.swarm import swarm_on_emulated

    need_root()
    need("the Docker SDK for Python (scripts/setup.sh)",
         importlib.util.find_spec("docker") is not None)
    need("torch (scripts/setup.sh)", importlib.util.find_spec("torch") is not None)
    for binary in (*emulated.REQUIRED_BINARIES, "dockerd", "iptables", "tc"):
        need_binary(binary)
    with swarm_on_emulated(HOSTS, Path(tmp_path_factory.mktemp("swarm-hosts", numbered=True)),
                           dev_image_tar, IMAGE, labels=_host_labels) as swarm:
        yield swarm


def _host_labels(name: str, boards: str = str(BOARDS_PER_HOST)) -> dict[str, str]:
    return {"edgeprof.node": name, "edgeprof.profile": BOARD, "edgeprof.boards": boards}


def _running_workers(swarm) -> dict[str, dict]:
    """Each running worker container by its board: the machine whose daemon runs it, its
    cgroups (as /proc/PID/cgroup names them), their CPU quota and memory limit, and the
    root qdisc of its eth0 (read in its network namespace)."""
    found = {}
    for daemon in swarm.daemons:
        with swarm.client(daemon) as client:
            for container in client.containers.list(
                    filters={"label": ["edgeprof.role=worker"]}):
                pid = container.attrs["State"]["Pid"]
                groups = {}
                for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
                    _, controllers, path = line.split(":", 2)
                    groups.update(dict.fromkeys(controllers.split(","), path))
                cpu = Path("/sys/fs/cgroup/cpu") / groups["cpu"].lstrip("/")
                memory = Path("/sys/fs/cgroup/memory") / groups["memory"].lstrip("/")
                qdiscs = json.loads(subprocess.run(
                    ["nsenter", f"--net=/proc/{pid}/ns/net", "tc", "-j", "qdisc", "show",
                     "dev", "eth0"], capture_output=True, text=True, check=True).stdout)
                found[container.labels["edgeprof.node"]] = {
                    "machine": daemon.node.name, "cpu": groups["cpu"],
                    "memory": groups["memory"],
                    "cpu_cores": int((cpu / "cpu.cfs_quota_us").read_text())
                    / int((cpu / "cpu.cfs_period_us").read_text()),
                    "memory_bytes": int((memory / "memory.limit_in_bytes").read_text()),
                    "qdisc": next(q for q in qdiscs if q.get("root"))}
    return found


def test_boards_on_both_machines_each_under_its_profile(swarm, tmp_path):
    from profiler.cluster.cgroups import cfs_quota_us
    from profiler.cluster.profiles import load_catalog

    board = load_catalog().node_profiles(BOARD, 1)[0]
    out = tmp_path / "out"
    with open(tmp_path / "sweep.log", "wb") as log:
        sweep = subprocess.Popen(_argv(swarm, out, *ENDLESS), stdout=log,
                                 stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        workers = HOSTS * BOARDS_PER_HOST
        for rank in range(workers):  # every worker has taken a step
            steps = _wait_for(lambda r=rank: next(out.glob(
                f"cells/*/attempt-1/events/steps-worker-{r}.jsonl"), None), sweep)
            _wait_for(lambda s=steps: s.stat().st_size > 0 or None, sweep)
        running = _running_workers(swarm)
    finally:
        sweep.send_signal(signal.SIGTERM)
        try:
            sweep.wait(timeout=120)
        finally:
            if sweep.poll() is None:
                sweep.kill()
                sweep.wait()
    # Each board's worker ran on its own machine, and both machines held boards.
    assert {name: w["machine"] for name, w in running.items()} == {
        f"n{h}-b{b}": f"n{h}" for h in range(HOSTS) for b in range(BOARDS_PER_HOST)}
    quota_us, period_us = cfs_quota_us(board.cpu_cores)
    for name, worker in running.items():
        for controller in ("cpu", "memory"):
            # Under its machine's cgroup share: the machine's quota holds for its boards.
            assert f"/{worker['machine']}/" in worker[controller], (name, worker[controller])
        # The board profile's quota (Swarm's NanoCPUs, rounded down to the emulated
        # cluster's CFS quota), memory limit and link.
        assert worker["cpu_cores"] == pytest.approx(quota_us / period_us, abs=1e-3), name
        assert worker["memory_bytes"] == board.memory_mb * 1024 * 1024, name
        assert worker["qdisc"]["kind"] == "tbf", (name, worker["qdisc"])
        # The rate at which the overlay's frames carry TCP's payload as fast as a 1500-byte
        # Ethernet of the profile's link does (tc keeps it in kbit).
        rate_kbit = int(tbf_rate_mbit(board.link_mbit, OVERLAY_MTU) * 1000)
        assert worker["qdisc"]["options"]["rate"] * 8 == rate_kbit * 1000, name
    starts = [json.loads((next(out.glob("cells/*/attempt-1/events")) / f"worker-{r}.jsonl")
                         .open().readline())["node"] for r in range(workers)]
    assert sorted(starts) == sorted(running)


def test_a_bad_boards_label_is_one_line(swarm, tmp_path):
    swarm.label("n1", _host_labels("n1", boards="lots"))
    try:
        done = subprocess.run(_argv(swarm, tmp_path / "out", "--engine", "torch-ddp",
                                    "--model", "lenet-mlp", "--max-samples", "256"),
                              capture_output=True, text=True, timeout=120, cwd=ROOT)
    finally:
        swarm.label("n1", _host_labels("n1"))
    assert_one_line(done, "Swarm node n1", "edgeprof.boards=lots")
    assert not (tmp_path / "out" / "results.jsonl").exists() or not _records(tmp_path / "out")


def test_cluster_status_lists_each_board_with_its_limits(swarm):
    done = subprocess.run([sys.executable, "-m", "profiler.cli", "cluster", "status",
                           "--cluster", "swarm", "--swarm-host", swarm.manager_url,
                           "--swarm-limits", "none", "--json"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    # An emulated board keeps its profile's limits under --swarm-limits none.
    assert [(n["name"], n["profile"], n["cpu_cores"], n["memory_mb"])
            for n in json.loads(done.stdout)] == [
        (f"n{h}-b{b}", BOARD, 0.3, 1024) for h in range(HOSTS) for b in range(BOARDS_PER_HOST)]
