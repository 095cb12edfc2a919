"""``--cluster swarm`` on a real Swarm of two emulated Pi 4 nodes on this host.

Each node of an emulated cluster (2 x pi4: the profiles' quotas fit this host's two
cores unscaled, so a task's limit fits under its node's) runs a dockerd of its own in
its network namespace, its containers under the node's cgroup; node 0 is the manager,
node 1 joined over its emulated link (``tests.support.swarm``). The tasks run a
development image: a minbase Debian made by mmdebstrap once per test session (about
20 s to 90 s, as the mirror answers), imported on each node, with this host's Python,
venv, repository and Fashion-MNIST bind-mounted read-only (``--swarm-mounts``), so that
the containers run this checkout's code; edgeprof's own image is ``edgeprof image
build``'s. Sweeps run through the real CLI, with the metrics agent (a service per node
sampling each task's own container) every 0.2 s.

After every test no service, network or container of edgeprof's is left on any node
(asked of each daemon's API), and at the end of the module the host's iptables are as
they were (each dockerd rewrote its own namespace's only).

Needs root, dockerd, mmdebstrap (and a Debian mirror, once a session) and the Docker
SDK; under CI=true their absence fails.
"""

from __future__ import annotations

import importlib.util
import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, assert_one_line, need, need_binary, need_root

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
IMAGE = "edgeprof-dev:test"
NODES = 2
SMALL = ("--model", "lenet-mlp", "--batch", "32", "--devices", "2", "--epochs", "1",
         "--max-samples", "256", "--val-samples", "64")
CONTAINERS_GONE_S = 15
WAIT_S = 240  # for a file a sweep writes, on a loaded 2-core host


@pytest.fixture(scope="session")
def dev_image_tar(tmp_path_factory) -> Path:
    from tests.support.swarm import session_dev_image_tar

    need_binary("mmdebstrap")
    return session_dev_image_tar(tmp_path_factory)


@pytest.fixture(scope="module")
def swarm(tmp_path_factory, dev_image_tar):
    """A Swarm of ``NODES`` emulated Pi 4s, the development image on each."""
    from profiler.cluster import emulated
    from tests.support.swarm import swarm_on_emulated

    need_root()
    need("the Docker SDK for Python (scripts/setup.sh)",
         importlib.util.find_spec("docker") is not None)
    need("torch and mxnet (scripts/setup.sh)", all(
        importlib.util.find_spec(m) is not None for m in ("torch", "mxnet")))
    for binary in (*emulated.REQUIRED_BINARIES, "dockerd", "iptables"):
        need_binary(binary)
    with swarm_on_emulated(NODES, Path(tmp_path_factory.mktemp("swarm", numbered=True)),
                           dev_image_tar, IMAGE) as swarm:
        print(f"\nSwarm of {NODES} formed in {swarm.formed_s:.1f} s, image imported on "
              f"every node in {swarm.imported_s:.1f} s")
        yield swarm


@pytest.fixture(autouse=True)
def nothing_left(swarm):
    """After each test: no service or network of edgeprof's on the Swarm, and none of its
    containers on any node. The manager forgets a removed service's tasks before the
    nodes have removed their exited containers: those get ``CONTAINERS_GONE_S``."""
    yield
    with swarm.client() as client:
        left = [f"service {s['Spec']['Name']}" for s in client.api.services()]
        left += [f"network {n['Name']}"
                 for n in client.api.networks(filters={"label": "edgeprof"})]
    assert not left, left
    deadline = time.monotonic() + CONTAINERS_GONE_S
    while True:
        left = []
        for daemon in swarm.daemons:
            with swarm.client(daemon) as client:
                # The low-level list: no inspect of a container going away meanwhile.
                left += [f"{daemon.node.name}: container {c['Names'][0]} ({c['Status']})"
                         for c in client.api.containers(all=True,
                                                        filters={"label": "edgeprof"})]
                left += [f"{daemon.node.name}: network {n['Name']}"
                         for n in client.api.networks(filters={"label": "edgeprof"})]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not left, left


def _argv(swarm, out: Path, *args: str, image: str = IMAGE,
          host: str | None = None) -> list[str]:
    from tests.support.swarm import OVERLAY_MTU, dev_mounts

    return [sys.executable, "-m", "profiler.cli", "sweep", "--cluster", "swarm",
            "--swarm-host", host or swarm.manager_url, "--swarm-image", image,
            "--swarm-python", sys.executable, "--swarm-mounts", ",".join(dev_mounts(ROOT)),
            "--swarm-mtu", str(OVERLAY_MTU),
            "--interval", "0.2", "--out", str(out), *args]


def _sweep(swarm, out: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(_argv(swarm, out, *args, **kw), capture_output=True, text=True,
                          timeout=600, cwd=ROOT)


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


ENGINES = ("torch-ddp", "mxnet", "torch", "horovod")


def test_ddp_parameter_server_and_horovod_cells_ok(swarm, tmp_path):
    """torch DDP, MXNet's and torch's parameter servers (colocated: a server beside each
    worker, MXNet's scheduler on n0 too), Horovod over Gloo."""
    need("horovod (scripts/setup.sh)", importlib.util.find_spec("horovod") is not None)
    out = tmp_path / "out"
    done = _sweep(swarm, out, *SMALL, "--engine", ",".join(ENGINES),
                  "--placement", "colocated")
    assert done.returncode == 0, done.stderr[-3000:]
    records = _records(out)
    assert {r["engine"]: r["status"] for r in records} == dict.fromkeys(ENGINES, "ok"), \
        [r["reason"] for r in records]
    for record in records:
        assert record["cluster"] == "swarm" and record["syncs_per_worker"] == 4
        assert record["first_step_s"] > 0
        print(f"{record['engine']}: first step {record['first_step_s']:.1f} s after launch")
        cell_dir = out / "cells" / record["cell_id"] / f"attempt-{record['attempt']}"
        # Every worker's events came back through the bind mount, from both nodes.
        starts = [json.loads((cell_dir / "events" / f"worker-{rank}.jsonl").open().readline())
                  for rank in range(2)]
        assert sorted(s["node"] for s in starts) == ["n0", "n1"]
        _check_metrics(record, cell_dir)


def _check_metrics(record: dict, cell_dir: Path) -> None:
    """The agents sampled each node's own containers: the per-node columns and energy
    are there, as on the emulated cluster."""
    from profiler.metrics.summary import summarize_cell

    assert record["metrics_nodes"] == 2 and record["cpu_percent_mean"] is not None
    assert record["rss_mb_peak"] > 0 and record["net_sent_kb"] > 0
    # Over the whole attempt (the training alone is shorter than a few samples).
    window = (record["launched_at"], record["reaped_at"])
    nodes = {n: summarize_cell(cell_dir, [n], *window) for n in ("n0", "n1")}
    for name, node in nodes.items():
        print(record["engine"], name, {k: node[k] for k in (
            "cpu_percent_mean", "mem_used_mb_peak", "rss_mb_peak", "net_sent_kb",
            "net_recv_kb")})
        # A share of the node's 0.7-core quota (its containers' limits sum under it).
        assert 0 < node["cpu_percent_mean"] <= 130
        assert 0 < node["mem_used_mb_peak"] < 4096 and node["rss_mb_peak"] > 50
        assert node["net_sent_kb"] > 0 and node["net_recv_kb"] > 0
    if record["engine"] == "torch-ddp":
        # Two workers allreduce with each other only: what one container sent, the
        # other's received (the node's or the host's counters would not balance so).
        assert nodes["n1"]["net_recv_kb"] == pytest.approx(nodes["n0"]["net_sent_kb"],
                                                           rel=0.05)
        assert nodes["n0"]["net_recv_kb"] == pytest.approx(nodes["n1"]["net_sent_kb"],
                                                           rel=0.05)
    # Modelled from each node's containers' CPU by pi4's model (2.7 W idle, 6.4 W
    # full): the machine's meters are not an emulated board's.
    assert record["energy_source"] == "modelled"
    assert set(record["energy_j_by_node"]) == {"n0", "n1"}
    for joules in record["energy_j_by_node"].values():
        assert 2.7 * record["train_s"] * 0.99 <= joules <= 6.4 * record["train_s"] * 1.01
    roles = {"worker", "server"} if record["engine"] in ("mxnet", "torch") else {"worker"}
    assert roles <= set(record["energy_j_by_role"])


# Unbounded: a cell meant to be interrupted cannot end first, on any host.
LONG = ("--engine", "torch-ddp", "--model", "lenet-mlp", "--batch", "32", "--devices", "2",
        "--epochs", "100000", "--max-samples", "60000", "--val-samples", "64")


def _start_training(swarm, out: Path, log: Path, args: tuple[str, ...] = LONG
                    ) -> subprocess.Popen:
    """A sweep of one unbounded cell (DDP's), returned once worker 1 has taken a step."""
    with open(log, "wb") as output:
        sweep = subprocess.Popen(_argv(swarm, out, *args), stdout=output,
                                 stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        _wait_for(lambda: _first_step(next(out.glob("cells/*/attempt-1"), None), 1), sweep)
    except BaseException:
        sweep.kill()
        sweep.wait()
        raise
    return sweep


def _first_step(cell_dir: Path | None, rank: int) -> bool:
    """Whether the worker of ``rank`` has taken its first step (its events say so)."""
    if cell_dir is None:
        return False
    try:
        lines = (cell_dir / "events" / f"worker-{rank}.jsonl").read_text().splitlines()
    except OSError:
        return False
    return any('"first_step"' in line for line in lines)


def test_a_worker_task_killed_fails_the_cell_naming_the_role(swarm, tmp_path):
    out = tmp_path / "out"
    _kill_worker_task(swarm, _start_training(swarm, out, tmp_path / "sweep.log"))
    (record,) = _records(out)
    assert record["status"] == "failed"
    assert "worker" in record["reason"], record["reason"]


def _kill_worker_task(swarm, sweep: subprocess.Popen) -> None:
    """Kill node 1's worker container (SIGKILL), then wait for the sweep's end."""
    try:
        with swarm.client(swarm.daemons[1]) as client:
            (worker,) = client.containers.list(filters={"label": ["edgeprof.role=worker"]})
            worker.kill()
        sweep.wait(timeout=WAIT_S)
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()


def test_sigterm_mid_cell_removes_the_cells_services_and_network(swarm, tmp_path):
    sweep = _start_training(swarm, tmp_path / "out", tmp_path / "sweep.log")
    sweep.send_signal(signal.SIGTERM)
    assert sweep.wait(timeout=WAIT_S) != 0
    # nothing_left checks the Swarm and every node


def test_a_killed_controller_leaves_what_resume_removes_and_finishes(swarm, tmp_path):
    """``kill -9`` of the controller mid-sweep: its task processes remove their services
    as it dies (their parent-death signal), its cell's network stays; ``--resume``
    removes that network, keeps the finished cell and runs the killed one again, ``ok``.
    The killed cell trains 128 steps a worker: it is killed at its first."""
    out = tmp_path / "sweep"
    args = ("--engine", "torch-ddp", "--model", "lenet-mlp", "--devices", "2", "--batch",
            "64,8", "--epochs", "1", "--max-samples", "2048", "--val-samples", "64")
    with open(tmp_path / "first.log", "wb") as output:
        sweep = subprocess.Popen(_argv(swarm, out, *args), stdout=output,
                                 stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        _wait_for(lambda: len(list(out.glob("cells/*/attempt-1"))) == 2, sweep)
        (first,) = _records(out)
        second = next(p for p in out.glob("cells/*/attempt-1")
                      if p.parent.name != first["cell_id"])
        _wait_for(lambda: _first_step(second, 0), sweep)
    finally:
        sweep.kill()
        sweep.wait()
    mine = {"label": f"edgeprof.controller={socket.gethostname()}:{sweep.pid}"}
    with swarm.client() as client:
        assert client.api.networks(filters=mine)
    resumed = _sweep(swarm, out, *args, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    records = _records(out)
    assert len(records) == 2 and records[0] == first and first["status"] == "ok"
    assert (records[1]["status"], records[1]["attempt"]) == ("ok", 2), records[1]["reason"]
    assert (second / "cell.json").exists()  # the killed attempt's folder stays
    with swarm.client() as client:
        assert not client.api.networks(filters=mine) and not client.api.services(filters=mine)


def test_a_pipeline_cell_shipped_live_and_a_user_script_cell_are_ok(swarm, tmp_path):
    """``--engine torch-pipe`` (two stages, one a node), its agents' points shipped live
    to InfluxDB 1.6 (Debian's ``influxd``) as they are spooled, and ``--script`` (the
    example DDP script, staged in the sweep's folder, which the tasks see through its
    bind mount)."""
    from collections import Counter

    from profiler.agent.spool_reader import find_spools, read_points
    from tests.support.servers import LocalServer, influx_query

    need_binary("influxd")
    with LocalServer("influxdb1", tmp_path / "influxdb") as server:
        pipe = _sweep(swarm, tmp_path / "pipe", "--engine", "torch-pipe", "--model",
                      "lenet-cnn", "--devices", "2", "--batch", "32", "--epochs", "1",
                      "--max-samples", "256", "--val-samples", "64",
                      "--influx-url", server.url, "--influx-db", "edgeprof")
        assert pipe.returncode == 0, pipe.stderr[-3000:]
        (record,) = _records(tmp_path / "pipe")
        assert (record["engine"], record["status"]) == ("torch-pipe", "ok"), record["reason"]
        assert record["metrics_nodes"] == 2
        # The agents' spools, and the workers' own (``train``, no node tag).
        spooled = Counter((point.measurement, point.tags.get("node") or base.get("node", ""))
                          for spool in find_spools(tmp_path / "pipe")
                          for base, point in read_points(spool))
        shipped = Counter()
        for series in influx_query(server.url, "edgeprof", "SELECT * FROM /.*/ WHERE "
                                   f"sweep = '{record['sweep_id']}' GROUP BY node"):
            shipped[(series["name"], series["tags"].get("node", ""))] += len(series["values"])
    assert {("cpu", "n0"), ("cpu", "n1"), ("net", "n1"), ("proc", "n0")} <= set(spooled)
    assert shipped == spooled
    script = _sweep(swarm, tmp_path / "script", "--script",
                    str(ROOT / "examples" / "ddp_train.py"), "--script-args",
                    "--epochs {epochs} --batch {batch} --max-samples 256 --val-samples 64",
                    "--devices", "2", "--batch", "32", "--epochs", "1")
    assert script.returncode == 0, script.stderr[-3000:]
    (record,) = _records(tmp_path / "script")
    assert (record["engine"], record["status"]) == ("script", "ok"), record["reason"]
    assert record["val_accuracy"] is not None and record["metrics_nodes"] == 2


def _wait_for(found, sweep: subprocess.Popen):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        value = found()
        if value:
            return value
        assert sweep.poll() is None, "the sweep ended before the worker trained"
        time.sleep(0.1)
    raise AssertionError(f"nothing within {WAIT_S} s")


def test_cluster_status_lists_the_nodes_with_their_profiles(swarm):
    done = subprocess.run([sys.executable, "-m", "profiler.cli", "cluster", "status",
                           "--cluster", "swarm", "--swarm-host", swarm.manager_url,
                           "--json"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    nodes = json.loads(done.stdout)
    assert [(n["name"], n["role"], n["profile"], n["cpu_cores"]) for n in nodes] == [
        ("n0", "manager", "pi4", 0.7), ("n1", "worker", "pi4", 0.7)]
    assert [n["address"] for n in nodes] == [n.address for n in swarm.nodes]


def test_no_swarm_at_the_address_is_one_line(swarm, tmp_path):
    done = _sweep(swarm, tmp_path / "out", *SMALL, "--engine", "torch-ddp",
                  host=f"unix://{tmp_path}/no-docker.sock")
    assert_one_line(done, "no Docker Engine answers", "--swarm-host")


def test_an_image_not_on_the_swarm_is_one_line(swarm, tmp_path):
    done = _sweep(swarm, tmp_path / "out", *SMALL, "--engine", "torch-ddp",
                  image="edgeprof-absent:1")
    assert_one_line(done, "--swarm-image edgeprof-absent:1")


def test_a_swarm_worker_or_no_address_as_the_manager_is_one_line(swarm, tmp_path):
    done = _sweep(swarm, tmp_path / "out", *SMALL, "--engine", "torch-ddp",
                  host=swarm.daemons[1].url)
    assert_one_line(done, "is a Swarm worker, not a manager", "--swarm-host")
    done = _sweep(swarm, tmp_path / "out", *SMALL, "--engine", "torch-ddp",
                  host="manager:2375")
    assert_one_line(done, "--swarm-host manager:2375 is not the address of an Engine API",
                    "tcp://HOST:2375")


def test_a_node_without_a_profile_label_is_one_line(swarm, tmp_path):
    swarm.label("n1", {"edgeprof.node": "n1"})
    try:
        done = _sweep(swarm, tmp_path / "out", *SMALL, "--engine", "torch-ddp")
    finally:
        swarm.label("n1", {"edgeprof.node": "n1", "edgeprof.profile": "pi4"})
    assert_one_line(done, "Swarm node n1", "edgeprof.profile")


def test_a_node_drained_mid_cell_fails_it_naming_the_node(swarm, tmp_path):
    """``docker node update --availability drain n1`` while DDP trains: the manager shuts
    n1's tasks down (and cannot place them elsewhere: they are pinned), so the cell
    fails, and its reason says n1 was drained, not only that a task ended."""
    out = tmp_path / "out"
    sweep = _start_training(swarm, out, tmp_path / "sweep.log")
    try:
        swarm.availability("n1", "drain")
        sweep.wait(timeout=WAIT_S)
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
        swarm.availability("n1", "active")
    (record,) = _records(out)
    print(record["reason"])
    assert record["status"] == "failed"
    assert "node n1 is drained" in record["reason"], record["reason"]


# Last: it stops a node's daemon (and starts it again).
def test_a_node_s_daemon_stopped_mid_cell_fails_it_naming_the_node(swarm, tmp_path):
    out = tmp_path / "out"
    sweep = _start_training(swarm, out, tmp_path / "sweep.log")
    try:
        swarm.stop_daemon("n1")
        sweep.wait(timeout=WAIT_S)
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
        swarm.restart_daemon("n1")
    (record,) = _records(out)
    print(record["reason"])
    assert record["status"] == "failed"
    assert "node n1 (down" in record["reason"], record["reason"]
