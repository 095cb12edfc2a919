"""The PyTorch engines on the emulated cluster: processes in network namespaces, Gloo
bound to each node's ``eth0``, the gradients and weights crossing the 100 Mbit veth links
(counted on each node's own interface), every process under its node's CPU quota once
its start-up is done.

Needs root, like every emulated-cluster test.
"""

from __future__ import annotations

import importlib.util

import pytest

from profiler.engines import get_engine
from profiler.engines.base import TrainOptions
from profiler.sweep.grid import CellConfig, validate
from profiler.sweep.runner import run_cell
from tests.conftest import emulated_nodes, need
from workloads.models import parameter_count

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]
STEPS = 4


@pytest.fixture(scope="module")
def cluster():
    """The emulated cluster that is up (3 nodes at least), or one brought up here."""
    need("torch (scripts/setup.sh)", importlib.util.find_spec("torch") is not None)
    yield from emulated_nodes(3)


def _run(cluster, tmp_path, engine: str, **kw):
    from profiler.cluster import netns

    cell = validate(CellConfig(engine=engine, model="lenet-mlp", layers=None, devices=2,
                               batch=32, max_samples=32 * 2 * STEPS, **kw))
    plugin = get_engine(engine)
    nodes = cluster.nodes()[:plugin.nodes_needed(cell)]
    before = {n.name: netns.interface_counters(n.scope.netns) for n in nodes}
    rec = run_cell(cell, cluster, plugin, tmp_path / cell.cell_id,
                   TrainOptions(val_samples=64), sweep_id="t", timeout_s=300,
                   monitor_interval_s=None)
    after = {n.name: netns.interface_counters(n.scope.netns) for n in nodes}
    moved = {name: {key: after[name][key] - before[name][key] for key in ("tx_bytes", "rx_bytes")}
             for name in before}
    return rec, moved


@pytest.mark.parametrize("sync", ["sync", "async"])
def test_parameter_server_traffic_crosses_the_nodes_links(cluster, tmp_path, sync):
    rec, moved = _run(cluster, tmp_path, "torch", sync=sync)
    assert rec["status"] == "ok", rec["reason"]
    assert rec["cluster"] == "emulated" and rec["syncs_per_worker"] == STEPS
    # --placement master: the server on n0, workers on n1 and n2. Each worker pushes its
    # gradients and pulls the weights every step (P bytes each way), the server takes
    # and gives N x P: all of it on the nodes' own eth0, not the host's loopback.
    floor = STEPS * 4 * parameter_count("lenet-mlp")
    for worker in ("n1", "n2"):
        assert moved[worker]["tx_bytes"] >= floor and moved[worker]["rx_bytes"] >= floor
    assert moved["n0"]["rx_bytes"] >= 2 * floor and moved["n0"]["tx_bytes"] >= 2 * floor


def test_ddp_allreduce_crosses_the_nodes_links(cluster, tmp_path):
    rec, moved = _run(cluster, tmp_path, "torch-ddp")
    assert rec["status"] == "ok", rec["reason"]
    # Ring allreduce at N = 2: each worker sends and receives at least P per step.
    floor = STEPS * 4 * parameter_count("lenet-mlp")
    for worker in ("n0", "n1"):
        assert moved[worker]["tx_bytes"] >= floor and moved[worker]["rx_bytes"] >= floor
