"""Real sweeps on the emulated cluster: `edgeprof sweep --cluster emulated` end to end.

The sweep brings the cluster up itself (none is up when it starts) and takes it down at
the end; MXNet's scheduler, server and workers run inside the nodes, so KVStore traffic
crosses the 100 Mbit tbf links, and each node's agent reads that node's own cgroup and
``eth0``. Needs root, like every emulated-cluster test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, need_binary, need_root

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]


@pytest.fixture
def no_cluster():
    need_root()
    for binary in ("ip", "tc", "ethtool", "sysctl", "nsenter"):
        need_binary(binary)
    from profiler.cluster import emulated
    emulated.down()
    try:
        yield emulated
    finally:
        emulated.down()


def _sweep(out: Path, *args: str, env: dict | None = None) -> list[dict]:
    cmd = [sys.executable, "-m", "profiler.cli", "sweep", "--cluster", "emulated",
           "--interval", "0.5", "--out", str(out), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=360, cwd=ROOT,
                          env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def test_sweep_on_4_pi3b_nodes_reports_each_nodes_own_traffic_and_cpu(no_cluster, tmp_path):
    from profiler.metrics.summary import summarize_cell
    records = _sweep(tmp_path / "out", "--profile", "pi3b", "--model", "lenet-mlp,resnet",
                     "--layers", "20", "--batch", "32", "--devices", "4",
                     "--placement", "master", "--max-samples", "256", "--val-samples", "64")
    assert [r["status"] for r in records] == ["ok", "ok"], [r["reason"] for r in records]
    for record in records:
        assert record["cluster"] == "emulated"
        assert record["cpu_percent_mean"] is not None and record["net_sent_kb"] > 0
        cell_dir = tmp_path / "out" / "cells" / record["cell_id"] / f"attempt-{record['attempt']}"
        window = (record["launched_at"], record["reaped_at"])
        # Master placement: scheduler and server on n0, the 4 workers on n1..n4.
        nodes = {n: summarize_cell(cell_dir, [n], *window) for n in ("n0", "n1", "n2", "n3",
                                                                      "n4")}
        for name in ("n1", "n2", "n3", "n4"):
            node = nodes[name]
            print(record["model"], name, {k: node[k] for k in (
                "cpu_percent_mean", "mem_used_mb_peak", "net_sent_kb", "net_recv_kb")})
            # Each node's CPU is a share of its own 0.3-core quota, its memory its own.
            # Margin: usage deltas over 0.5 s samples whose timestamps jitter on a loaded
            # 2-core host (a CI run measured 119); twice the quota would still fail.
            assert 0 < node["cpu_percent_mean"] <= 130
            assert 0 < node["mem_used_mb_peak"] < 1024
            assert node["net_sent_kb"] > 0 and node["net_recv_kb"] > 0
        # Every worker talks only to n0: n0 receives what the workers send. Host totals
        # (or another node's counters) would not balance like this.
        workers_sent = sum(nodes[n]["net_sent_kb"] for n in ("n1", "n2", "n3", "n4"))
        print(record["model"], "n0 received", nodes["n0"]["net_recv_kb"], "KB; workers sent",
              workers_sent, "KB")
        assert nodes["n0"]["net_recv_kb"] == pytest.approx(workers_sent, rel=0.15)
        # Energy: modelled from each node's CPU use by pi3b's model (1.4 W idle, 3.7 W
        # full), every node of the cell between the two over the cell's window.
        assert record["energy_source"] == "modelled"
        window_s = record["train_s"]
        assert set(record["energy_j_by_node"]) == set(nodes)
        for name, joules in record["energy_j_by_node"].items():
            assert 1.4 * window_s * 0.99 <= joules <= 3.7 * window_s * 1.01, (name, joules)
        assert record["energy_j"] == pytest.approx(sum(record["energy_j_by_node"].values()),
                                                   abs=0.01)
        assert {"worker", "server"} <= set(record["energy_j_by_role"])
        assert record["j_per_sample"] > 0
    assert no_cluster.status()["up"] is False  # the sweep took down what it brought up


def test_a_cell_past_the_node_memory_is_oom_and_the_sweep_goes_on(no_cluster, tmp_path):
    profiles = tmp_path / "profiles.yaml"
    # Room for MXNet and LeNet, not for ResNet-20 activations at batch 512. Each model
    # family gets its profile's environment, over the controller's own.
    profiles.write_text("profiles:\n  smallpi: {link_mbit: 100, memory_mb: 400, "
                        "cpu_cores: 0.5, env_by_model: {"
                        "lenet-mlp: {MXNET_ENGINE_TYPE: ThreadedEngine}, "
                        "resnet: {MXNET_ENGINE_TYPE: ThreadedEnginePerDevice}}}\n")
    records = _sweep(tmp_path / "out", "--profile", "smallpi", "--model", "resnet,lenet-mlp",
                     "--layers", "20", "--batch", "512", "--devices", "1",
                     "--max-samples", "1024", "--val-samples", "64",
                     env={"EDGEPROF_PROFILES": str(profiles),
                          "MXNET_ENGINE_TYPE": "NaiveEngine"})
    by_model = {r["model"]: r for r in records}
    assert by_model["resnet"]["status"] == "oom", by_model["resnet"]["reason"]
    assert by_model["lenet-mlp"]["status"] == "ok", by_model["lenet-mlp"]["reason"]
    assert by_model["lenet-mlp"]["mxnet_engine"] == "ThreadedEngine"
