"""Horovod on the emulated cluster: one worker per network namespace, allreduce over the
100 Mbit veth links, counted on each node's own ``eth0``.

Needs root, like every emulated-cluster test. It also guards the workaround in
``workloads.hvd.bind_hostname_to_gloo_iface``: without it Horovod 0.28.1's allreduce
context binds to the host's loopback inside the namespaces and the cell fails.
"""

from __future__ import annotations

import importlib.util

import pytest

from profiler.engines.base import TrainOptions
from profiler.engines.horovod import HorovodEngine
from profiler.sweep.grid import CellConfig, validate
from profiler.sweep.runner import run_cell
from tests.conftest import emulated_nodes, need
from workloads.models import parameter_count

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]


@pytest.fixture
def cluster():
    """The emulated cluster that is up (2 nodes at least), or one brought up for this test."""
    need("Horovod built with MXNet (docs/horovod.md)",
         importlib.util.find_spec("horovod.mxnet") is not None)
    yield from emulated_nodes(2)


def test_two_horovod_workers_allreduce_across_emulated_nodes(cluster, tmp_path):
    from profiler.cluster import netns

    steps = 4
    cell = validate(CellConfig(engine="horovod", model="lenet-mlp", layers=None, devices=2,
                               batch=32, max_samples=32 * 2 * steps))
    nodes = cluster.nodes()[:2]
    before = [netns.interface_counters(n.scope.netns) for n in nodes]
    rec = run_cell(cell, cluster, HorovodEngine(), tmp_path / cell.cell_id,
                   TrainOptions(val_samples=64), sweep_id="t", timeout_s=300,
                   monitor_interval_s=None)
    after = [netns.interface_counters(n.scope.netns) for n in nodes]
    assert rec["status"] == "ok", rec["reason"]
    assert rec["cluster"] == "emulated" and rec["syncs_per_worker"] == steps
    # Ring allreduce at N=2: each worker sends and receives at least the model's bytes
    # per step, and it must cross the node's own eth0 (not the host's loopback).
    floor_bytes = steps * 4 * parameter_count("lenet-mlp")
    for b, a in zip(before, after):
        assert a["tx_bytes"] - b["tx_bytes"] >= floor_bytes
        assert a["rx_bytes"] - b["rx_bytes"] >= floor_bytes
