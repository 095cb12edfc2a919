"""The inventory cluster for real: sweeps over SSH into hosts that sshd serves.

No Raspberry Pi here: each "host" is an emulated node (a network namespace with its own
``eth0`` on the bridge) running Debian's sshd (``tests.support.sshd``), reached with a
key and known_hosts made by the test, through an Ansible INI inventory, exactly as a real
cluster would be. What differs from real Pis: the hosts share this machine's filesystem
and Python (each gets its own ``edgeprof_workdir``, so bringing results back is still
exercised). Each sshd runs in its node's CPU and memory cgroups, so what it starts is
limited like a Pi-class board.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import ROOT, assert_one_line, sshd_nodes

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
EDGEPROF = [sys.executable, "-m", "profiler.cli"]
GONE_WITHIN_S = 10.0
# A cell that only a limit or a signal ends, on any host: 100,000 epochs of 250 steps a
# worker, days of training even at 1 ms a step.
ENDLESS = ("--batch", "4", "--max-samples", "2000", "--epochs", "100000")


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    """Three emulated Pi 4 nodes with sshd: n0 the master, n1 and n2 the workers. (A Pi
    4's quota, 0.7 cores, imports MXNet, Horovod and torch in the host check and every
    cell's processes 2.3 x as fast as a Pi 3B's 0.3.)"""
    work = tmp_path_factory.mktemp("ssh")
    for sshd in sshd_nodes(work, 3, profile="pi4"):
        host_vars = {n: {"edgeprof_workdir": str(work / f"remote-{n}"),
                         "edgeprof_python": sys.executable} for n in ("n0", "n1", "n2")}
        inventory = sshd.write_inventory(work / "inventory.ini",
                                         {"master": ["n0"], "workers": ["n1", "n2"]},
                                         host_vars=host_vars)
        yield {"inventory": inventory, "work": work, "sshd": sshd}


def _sweep(hosts, out: Path, *extra: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*EDGEPROF, "sweep", "--cluster", "inventory", "--inventory", str(hosts["inventory"]),
         "--model", "lenet-mlp", "--dataset", "synthetic", "--val-samples", "64",
         "--out", str(out), *extra], cwd=ROOT, capture_output=True, text=True, **kw)


def _leftovers(hosts, *marks: str) -> list[str]:
    """What of a cell is still alive: any process in a node's network namespace but sshd
    itself (its listener, and the connection handlers it forks, which go with their
    connection), as the scheduler and servers run ``python -m workloads.serve`` and
    name no path; and any process anywhere whose command names a mark (the local
    ``ssh`` clients, anything started with the cell's folders)."""
    found = hosts["sshd"].processes()
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if marks and any(mark in cmd for mark in marks) and "pytest" not in cmd:
            found.append(f"{p.info['pid']}: {cmd[:160]}")
    return found


def _wait_gone(hosts, *marks: str) -> list[str]:
    deadline = time.monotonic() + GONE_WITHIN_S
    while (left := _leftovers(hosts, *marks)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def test_leftover_check_sees_a_process_that_names_no_path(hosts):
    """The check the stop tests rely on: a process in a node's namespace whose command
    line names none of the cell's folders (as ``python -m workloads.serve``) is found."""
    node = hosts["sshd"].nodes[1]
    assert _wait_gone(hosts) == []
    stray = subprocess.Popen(["nsenter", f"--net=/run/netns/{node.scope.netns}", "--",
                              sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        deadline = time.monotonic() + 10
        while not (left := _leftovers(hosts)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [line for line in left if line.startswith(f"{node.name} {stray.pid}:")], left
    finally:
        stray.kill()
        stray.wait()
    assert _wait_gone(hosts) == []


def test_status_shows_every_host(hosts, monkeypatch):
    done = subprocess.run([*EDGEPROF, "cluster", "status", "--inventory",
                           str(hosts["inventory"]), "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    from profiler import __version__
    assert [r["name"] for r in rows] == ["n0", "n1", "n2"]
    for row in rows:
        assert row["reachable"] and row["edgeprof"] == __version__
        assert row["cpus"] >= 1 and row["memory_mb"] > 100
        engines = row["engines"]
        # Each engine's own check, run on the host: the x86-64 MXNet wheel has the
        # parameter server, Horovod is built with Gloo, torch imports and multiplies.
        assert engines["mxnet"] == {"ok": True, "dist_kvstore": True}, engines
        assert engines["horovod"]["ok"] and engines["torch"]["ok"], engines
        assert engines["torch-ddp"]["ok"] and engines["torch-pipe"]["ok"], engines
        assert engines["script"]["ok"] and engines["hier"]["ok"], engines
        # PID 1 here is not systemd: the agent service's state cannot be known.
        assert row["agent"] == "unknown"
    # The table, from the same answers (a second probe of every host took 9 s).
    from click.testing import CliRunner
    from profiler.cluster import cli
    from profiler.cluster.inventory import status
    monkeypatch.setattr(status, "status", lambda path: rows)
    table = CliRunner().invoke(cli.cluster, ["status", "--inventory", str(hosts["inventory"])])
    assert table.exit_code == 0 and hosts["sshd"].nodes[2].address in table.stdout, table.output
    header, first = table.stdout.splitlines()[:2]
    # A column per engine the hosts answered for (the cluster package imports no engine).
    assert header.split()[7:15] == ["hier", "horovod", "mxnet", "script", "torch",
                                    "torch-ddp", "torch-pipe", "agent"], header
    assert first.split()[6:13] == ["yes"] * 7, table.stdout


def test_mxnet_and_horovod_cells_over_ssh(hosts, tmp_path):
    out = tmp_path / "sweep"
    # 16 steps a worker: a training window of a few 0.5 s samples even on Pi 4 quotas.
    done = _sweep(hosts, out, "--devices", "2", "--batch", "32", "--max-samples", "1024",
                  "--engine", "mxnet,horovod", "--interval", "0.5", timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(r["engine"] for r in records) == ["horovod", "mxnet"]
    from workloads.models import parameter_count
    model_kb = 4 * parameter_count("lenet-mlp") / 1024
    for rec in records:
        assert rec["status"] == "ok", rec["reason"]
        assert rec["cluster"] == "inventory" and rec["syncs_per_worker"] == 16
        # Metrics came back from the nodes' own agents, counted on their eth0: every
        # worker moved its gradients (16 steps x the model) over the wire. The window is
        # a fraction of a second against 0.5 s samples, and counters are interpolated at
        # its edges, so only one model's worth is certain to fall inside.
        assert rec["metrics_nodes"] == 2
        assert rec["net_sent_kb"] >= model_kb and rec["net_recv_kb"] >= model_kb
        assert rec["cpu_percent_mean"] is not None and rec["rss_mb_peak"] > 50
        cell = out / "cells" / rec["cell_id"] / "attempt-1"
        # Events and the step lines (workloads.steps) came home from the workers' nodes.
        assert sorted(p.name for p in (cell / "events").iterdir()) == [
            "steps-worker-0.jsonl", "steps-worker-1.jsonl", "worker-0.jsonl",
            "worker-1.jsonl"]
        # Every node of the cell sent back its agent's spool (MXNet: master + 2 workers).
        nodes_used = {"mxnet": ["n0", "n1", "n2"], "horovod": ["n0", "n1"]}[rec["engine"]]
        assert sorted(p.name for p in (cell / "metrics").iterdir()) == nodes_used
        assert (cell / "logs" / "worker-0.log").exists()
    # The remote copies were removed once they had arrived.
    for node in ("n0", "n1", "n2"):
        remote = hosts["work"] / f"remote-{node}" / "sweep" / "cells"
        assert not remote.exists() or not any(remote.glob("*/*/*"))
    assert _wait_gone(hosts, str(out), "remote-n") == []


def test_torch_cells_over_ssh(hosts, tmp_path):
    """The torch parameter server (the server on the master n0, workers on n1 and n2)
    and DDP over SSH, Gloo bound to each node's interface. (Async differs from sync
    only inside the server: tests/integration/test_torch_engines.py.)"""
    out = tmp_path / "sweep"
    done = _sweep(hosts, out, "--devices", "2", "--batch", "32", "--max-samples", "256",
                  "--engine", "torch,torch-ddp", "--interval", "0.5", timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted((r["engine"], r["sync"]) for r in records) == [
        ("torch", "sync"), ("torch-ddp", "sync")]
    for rec in records:
        assert rec["status"] == "ok", rec["reason"]
        assert rec["cluster"] == "inventory" and rec["syncs_per_worker"] == 4
        cell = out / "cells" / rec["cell_id"] / "attempt-1"
        logs = sorted(p.name for p in (cell / "logs").iterdir()
                      if not p.name.startswith("agent-"))
        servers = ["server-0.log"] if rec["engine"] == "torch" else []
        assert logs == servers + ["worker-0.log", "worker-1.log"], logs
        # Each node's clock measured over SSH as the cell started: these nodes share
        # this host's clock, so the offsets are the measurement's error (half a
        # round trip over loopback at most).
        workers = ["n1", "n2"] if rec["engine"] == "torch" else ["n0", "n1"]
        offsets = rec["clock_offsets_s"]
        assert set(offsets) >= set(workers)
        assert all(abs(offset) < 0.05 for offset in offsets.values()), offsets
        # The steps came home with the events: the breakdown names the workers' nodes.
        assert sorted(rec["worker_nodes"].values()) == workers
        assert (cell / "trace.json").exists() and rec["breakdown"] == "every step"
    assert _wait_gone(hosts, str(out), "remote-n") == []


def test_a_straggler_needs_cgroup_v2_on_the_hosts(hosts, tmp_path):
    """These hosts (this machine: cgroup v1 only) cannot slow a cell's processes with
    cpu.max: the sweep is refused in one line when its hosts are checked, before anything
    runs, and the node's own command (run over SSH) refuses too. The cgroup v2 path
    itself is tested against a folder laid out like v2 (tests/unit/test_stragglers.py)."""
    from profiler.cluster.inventory.cluster import InventoryCluster
    from profiler.cluster.inventory.hosts import read_inventory
    from profiler.errors import ClusterError

    out = tmp_path / "sweep"
    done = _sweep(hosts, out, "--engine", "torch", "--devices", "2", "--max-samples", "256",
                  "--straggler", "0.5", timeout=120)
    assert_one_line(done, "host n0 has no cgroup v2", "drop --straggler")
    assert not out.exists()
    cluster = InventoryCluster(read_inventory(hosts["inventory"]))
    node = cluster.nodes()[2]
    cell_dir = out / "cells" / "0123456789ab" / "attempt-1"
    with pytest.raises(ClusterError, match="node n2 has no cgroup v2 with the cpu controller"):
        cluster.slow_node(node, 0.5, cell_dir=cell_dir, processes=1)
    cluster.restore_node(node, cell_dir=cell_dir)  # nothing to undo: no error
    cluster.close()


def test_timeout_stops_the_processes_on_every_host(hosts, tmp_path):
    out = tmp_path / "sweep"
    # Endless work (ENDLESS), stopped by the 10 s limit (Pi 4 hosts train ~5 s after the
    # launch). Batch 4 on 20,000 samples alone, 2,500 steps a worker, was "far longer"
    # only on a slow enough host.
    done = _sweep(hosts, out, "--devices", "2", *ENDLESS, "--timeout", "10", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rec = json.loads((out / "results.jsonl").read_text().splitlines()[-1])
    assert rec["status"] == "timeout", rec
    assert _wait_gone(hosts, str(out), str(hosts["work"] / "remote-n")) == []


def test_ctrl_c_stops_the_processes_on_every_host(hosts, tmp_path):
    out = tmp_path / "sweep"
    proc = subprocess.Popen(
        [*EDGEPROF, "sweep", "--cluster", "inventory", "--inventory", str(hosts["inventory"]),
         "--model", "lenet-mlp", "--dataset", "synthetic", "--val-samples", "64",
         "--devices", "2", *ENDLESS, "--out", str(out)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        # Wait until the workers train on the hosts (their remote events folder exists).
        while not list(hosts["work"].glob("remote-n*/sweep/cells/*/attempt-1/events/*")):
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "the cell never started training"
            time.sleep(0.2)
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    rec = json.loads((out / "results.jsonl").read_text().splitlines()[-1])
    assert rec["status"] == "failed" and "interrupted" in rec["reason"]
    assert _wait_gone(hosts, str(out), str(hosts["work"] / "remote-n")) == []


def test_one_connection_per_host_env_off_command_lines_and_masters_closed(hosts, tmp_path):
    """Every ssh of a cluster to a host shares one connection (ControlMaster), made once;
    a process's environment reaches it on stdin, on no command line here or there; the
    process dies with its ssh; ``close`` ends the masters and removes their folder."""
    from profiler.cluster.base import kill_groups
    from profiler.cluster.inventory.cluster import InventoryCluster
    from profiler.cluster.inventory.hosts import read_inventory

    cluster = InventoryCluster(read_inventory(hosts["inventory"]))
    node = cluster.nodes()[1]
    logs = {n.name: hosts["work"] / f"sshd-{n.name}" / "sshd.log" for n in cluster.nodes()}
    accepted = {name: log.read_text().count("Accepted publickey") for name, log in logs.items()}
    value = "edgeprof-value-not-on-any-command-line"
    cell_dir = tmp_path / "sweep" / "cells" / "0123456789ab" / "attempt-1"
    try:
        assert set(cluster.clock_offsets(cluster.nodes())) == {"n0", "n1", "n2"}
        procs = [cluster.start(node, [sys.executable, "-c", "import os, time; print(os.environ["
                                      "'EDGEPROF_TEST_VALUE'], flush=True); time.sleep(60)"],
                               {"EDGEPROF_TEST_VALUE": value}, cell_dir / "logs" / f"p{i}.log")
                 for i in range(3)]
        deadline = time.monotonic() + 30
        while not all(value in (cell_dir / "logs" / f"p{i}.log").read_text()
                      for i in range(3)):
            assert time.monotonic() < deadline, "the processes never printed their value"
            time.sleep(0.1)
        for p in psutil.process_iter(["cmdline"]):
            assert value not in " ".join(p.info["cmdline"] or []), p.info["cmdline"]
        assert cluster.collect(cell_dir, [node]) == []
        # Three processes, a clock echo on each node and a collect: one new connection
        # per node (its master), where each ssh made its own before.
        for name, log in logs.items():
            assert log.read_text().count("Accepted publickey") - accepted[name] == 1, name
        kill_groups(procs, grace_s=1.0)
    finally:
        control_dir = cluster._connections.control_dir
        cluster.close()
    assert not Path(control_dir).exists()

    def masters() -> list:
        return [p.info["cmdline"] for p in psutil.process_iter(["cmdline"])
                if control_dir in " ".join(p.info["cmdline"] or [])]
    # ``ssh -O exit`` asks a master to end and returns; the master exits a moment later.
    deadline = time.monotonic() + GONE_WITHIN_S
    while masters() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert masters() == []
    assert _wait_gone(hosts) == []


def test_the_sweeps_inputs_go_to_a_node_once_and_are_removed_at_its_end(hosts, tmp_path):
    """A process naming a staged input (``<sweep>/inputs/...``) finds it on its node, at
    the node's own path; the folder goes once per node, and ``close`` removes it."""
    from profiler.cluster.base import kill_groups
    from profiler.cluster.inventory.cluster import InventoryCluster
    from profiler.cluster.inventory.hosts import read_inventory
    from profiler.inputs import stage, user_file

    source = tmp_path / "train.py"
    source.write_text("print('the user script')\n")
    staged = user_file("script", source, "--script")
    sweep_dir = tmp_path / "sweep"
    local_path = stage([staged], sweep_dir) / staged.staged_name
    cluster = InventoryCluster(read_inventory(hosts["inventory"]))
    node = cluster.nodes()[2]
    remote = hosts["work"] / "remote-n2" / "sweep" / "inputs" / staged.staged_name
    try:
        for attempt in (1, 2):
            cell_dir = sweep_dir / "cells" / "0123456789ab" / f"attempt-{attempt}"
            log = cell_dir / "logs" / "worker-0.log"
            proc = cluster.start(node, [sys.executable, "-c",
                                        "import sys; print(sys.argv[1]); "
                                        "print(open(sys.argv[1]).read(), flush=True)",
                                        str(local_path)], {}, log)
            try:
                assert proc.wait(timeout=60) == 0, log.read_text()
            finally:
                kill_groups([proc], grace_s=1.0)
            text = log.read_text()
            assert str(remote) in text and "the user script" in text, text
            if attempt == 1:
                first_copy_ns = remote.stat().st_mtime_ns
        assert remote.stat().st_mtime_ns == first_copy_ns  # not copied again
    finally:
        cluster.close()
    assert not remote.parent.exists()
    assert local_path.read_text() == "print('the user script')\n"  # the local copy stays


def test_a_users_model_file_goes_to_each_node_and_is_removed_at_the_end(hosts, tmp_path):
    """``--model PATH.py:FACTORY`` over SSH: the server (on n0) and each worker (n1, n2)
    import the model file from their own node's copy of the sweep's inputs, and no copy
    is left on a node once the sweep is over."""
    model = tmp_path / "tiny_net.py"
    model.write_text("import sys\nfrom torch import nn\n"
                     "print('model file:', __file__, file=sys.stderr)\n\n"
                     "def make(num_classes=10):\n"
                     "    return nn.Sequential(nn.Flatten(), nn.Linear(784, num_classes))\n")
    out = tmp_path / "sweep"
    done = _sweep(hosts, out, "--model", f"{model}:make", "--engine", "torch", "--devices",
                  "2", "--batch", "32", "--max-samples", "128", "--no-agent", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (rec,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert rec["status"] == "ok", rec["reason"]
    assert rec["model"] == "tiny_net.py:make" and rec["parameters"] == 784 * 10 + 10
    staged = f"model-{rec['model_digest'][:12]}.py"
    logs = out / "cells" / rec["cell_id"] / "attempt-1" / "logs"
    for log, node in (("server-0", "n0"), ("worker-0", "n1"), ("worker-1", "n2")):
        remote = hosts["work"] / f"remote-{node}" / "sweep" / "inputs" / staged
        assert f"model file: {remote}" in (logs / f"{log}.log").read_text(), log
        assert not remote.parent.exists(), node
    assert _wait_gone(hosts, str(out), "remote-n") == []


def test_a_pipeline_cell_over_ssh_has_its_stages_on_two_hosts(hosts, tmp_path):
    """``torch-pipe``: LeNet-CNN in 2 stages, stage 0 on n0 and stage 1 on n1, the
    activations and their gradients over Gloo between the two hosts' interfaces; the
    split was priced on the link measured between them, and nothing is left on a node."""
    out = tmp_path / "sweep"
    done = _sweep(hosts, out, "--engine", "torch-pipe", "--model", "lenet-cnn", "--devices",
                  "2", "--batch", "32", "--microbatches", "2", "--max-samples", "128",
                  "--no-agent", timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (rec,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert rec["status"] == "ok", rec["reason"]
    assert rec["cluster"] == "inventory" and rec["syncs_per_worker"] == 4
    assert rec["worker_nodes"] == {"0": "n0", "1": "n1"}, rec["worker_nodes"]
    cell = out / "cells" / rec["cell_id"] / "attempt-1"
    starts = [next(json.loads(line) for line in
                   (cell / "events" / f"worker-{rank}.jsonl").read_text().splitlines()
                   if '"start"' in line) for rank in (0, 1)]
    assert [s["stage"] for s in starts] == [0, 1]
    assert starts[0]["split"] == starts[1]["split"] and sum(starts[0]["split"]) == 12
    assert starts[0]["link_bytes_per_s"] > 0 and len(rec["stage_compute_ms"]) == 2
    assert rec["pipe_split"] == ",".join(map(str, starts[0]["split"]))
    for node in ("n0", "n1", "n2"):
        remote = hosts["work"] / f"remote-{node}" / "sweep"
        assert not remote.exists() or not any(remote.glob("cells/*/*/*")), node
    assert _wait_gone(hosts, str(out), "remote-n") == []
