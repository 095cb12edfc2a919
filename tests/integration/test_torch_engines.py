"""Real PyTorch trainings through the cell runner: the ``torch`` parameter server (sync and
async, one server on a master node or one beside every worker) and ``torch-ddp``
(allreduce), every process a real ``workloads.train`` talking Gloo over loopback, each in
its own process group, every process reaped at the end."""

from __future__ import annotations

import importlib.util
import json

import pytest

from profiler.cluster.base import Node, NodeScope
from profiler.cluster.local import LocalCluster
from profiler.engines import get_engine
from profiler.engines.base import TrainOptions
from profiler.errors import ConfigError
from profiler.sweep.grid import CellConfig, expand, validate
from profiler.sweep.runner import run_cell
from tests.conftest import need, no_children_left
from workloads.torch_ps import slices

pytestmark = pytest.mark.integration
TINY = TrainOptions(val_samples=300)


def _need_torch() -> None:
    need("torch (scripts/setup.sh installs its CPU build)",
         importlib.util.find_spec("torch") is not None)


def _cell(**kw) -> CellConfig:
    return validate(CellConfig(**{"engine": "torch", "model": "lenet-mlp", "layers": None,
                                  "devices": 2, "batch": 32, "max_samples": 640, **kw}))


def _run(tmp_path, cell, timeout_s=240):  # one cell through the runner
    engine = get_engine(cell.engine)
    cluster = LocalCluster(engine.nodes_needed(cell))
    return run_cell(cell, cluster, engine, tmp_path / cell.cell_id, TINY, sweep_id="t",
                    timeout_s=timeout_s, monitor_interval_s=None)



def _events(cell_dir, rank):
    path = cell_dir / "events" / f"worker-{rank}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_slices_cover_the_parameters_once():
    assert slices(10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert slices(2, 4) == [(0, 1), (1, 2), (2, 2), (2, 2)]
    for total, parts in ((61706, 1), (61706, 10), (7, 7)):
        bounds = slices(total, parts)
        assert bounds[0][0] == 0 and bounds[-1][1] == total
        assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))


def test_plans_place_servers_as_mxnet_does(tmp_path):
    nodes = [Node(f"n{i}", address=f"10.9.0.{i + 1}", scope=NodeScope(interfaces=("eth0",)))
             for i in range(4)]
    ps = get_engine("torch")
    master = ps.plan(_cell(devices=3), nodes, tmp_path, TINY)
    assert [(s.role, s.rank, s.node.name, s.env["RANK"], s.decisive) for s in master] == [
        ("server", 0, "n0", "0", False), ("worker", 0, "n1", "1", True),
        ("worker", 1, "n2", "2", True), ("worker", 2, "n3", "3", True)]
    for spec in master:
        assert spec.env["WORLD_SIZE"] == "4" and spec.env["EDGEPROF_PS_SERVERS"] == "1"
        assert spec.env["MASTER_ADDR"] == "10.9.0.1"
        assert spec.env["GLOO_SOCKET_IFNAME"] == "eth0"
        assert spec.argv[spec.argv.index("--role") + 1] == spec.role
        assert spec.argv[spec.argv.index("--comm") + 1] == "ps-sync"
    colocated = ps.plan(_cell(devices=3, placement="colocated"), nodes, tmp_path, TINY)
    assert [(s.role, s.node.name, s.env["RANK"]) for s in colocated] == [
        ("server", "n0", "0"), ("server", "n1", "1"), ("server", "n2", "2"),
        ("worker", "n0", "3"), ("worker", "n1", "4"), ("worker", "n2", "5")]
    assert ps.nodes_needed(_cell(devices=3, placement="colocated")) == 3
    assert ps.nodes_needed(_cell(devices=3)) == 4 and ps.nodes_needed(_cell(devices=1)) == 1
    ddp = get_engine("torch-ddp").plan(_cell(engine="torch-ddp", devices=3), nodes, tmp_path, TINY)
    assert [(s.role, s.node.name, s.env["RANK"]) for s in ddp] == [
        ("worker", "n0", "0"), ("worker", "n1", "1"), ("worker", "n2", "2")]
    assert ddp[0].argv[ddp[0].argv.index("--comm") + 1] == "allreduce"


def test_grid_knows_the_torch_engines():
    with pytest.raises(ConfigError, match="torch-ddp trains sync only"):
        validate(CellConfig(engine="torch-ddp", model="lenet-mlp", layers=None, devices=2,
                            sync="async"))
    with pytest.raises(ConfigError,
                       match="mobilenetv2 runs on the torch, torch-ddp and torch-pipe"):
        validate(CellConfig(engine="mxnet", model="mobilenetv2", layers=None))
    cells = expand(engines=["mxnet", "torch", "torch-ddp"], models=["lenet-mlp", "mobilenetv2"],
                   layers=[None], batches=[32], devices=[1, 2], syncs=["sync", "async"])
    got = sorted((c.engine, c.model, c.devices, c.sync) for c in cells)
    assert ("mxnet", "mobilenetv2", 2, "sync") not in got  # left out: torch has it
    assert ("torch-ddp", "lenet-mlp", 2, "async") not in got
    assert ("torch", "mobilenetv2", 2, "async") in got
    # One device: one cell per engine and model it has (mxnet has no mobilenetv2).
    assert sum(1 for c in got if c[2] == 1) == 5


TWO_WORKERS = {name: _cell(epochs=2, **kw) for name, kw in {
    "ps-sync": dict(), "ps-async": dict(sync="async"),
    "ps-sync-colocated": dict(placement="colocated"), "ddp": dict(engine="torch-ddp")}.items()}
# Every worker the whole set (the study's MNIST script), beside the sharded cells above.
REPLICATED = _cell(engine="torch-ddp", data_partition="replicate")


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    """One sweep of the cells above on the local cluster: name -> (record, cell folder)."""
    _need_torch()
    from profiler.sweep.sweep import SweepSettings, run_sweep

    out = tmp_path_factory.mktemp("torch") / "sweep"
    cells = {**TWO_WORKERS, "ddp-replicate": REPLICATED}
    outcome = run_sweep(SweepSettings(cells=list(cells.values()), out_dir=out,
                                      interval_s=None, val_samples=300), progress=False)
    by_id = {r["cell_id"]: r for r in outcome.records}
    return {name: (by_id[cell.cell_id], out / "cells" / cell.cell_id / "attempt-1")
            for name, cell in cells.items()}


@pytest.mark.parametrize("name", list(TWO_WORKERS))
def test_two_workers_train_above_chance(two_workers, name):
    rec, cell_dir = two_workers[name]
    cell = TWO_WORKERS[name]
    assert rec["status"] == "ok", rec["reason"]
    assert rec["engine"] == cell.engine
    # 640 samples, 2 workers, batch 32: 10 steps (one round with the servers) an epoch.
    assert rec["syncs_per_worker"] == 20
    assert len(rec["epoch_s"]) == 2 and rec["samples_per_s"] > 0
    if cell.sync == "sync":
        assert rec["val_accuracy"] > 0.3, rec["val_accuracy_per_epoch"]
    else:  # stale gradients: the best epoch well above chance (0.1)
        assert max(rec["val_accuracy_per_epoch"]) > 0.3, rec["val_accuracy_per_epoch"]
    starts = [_events(cell_dir, rank)[0] for rank in (0, 1)]
    comm = "allreduce" if cell.engine == "torch-ddp" else f"ps-{cell.sync}"
    assert [(e["framework"], e["comm"], e["num_workers"]) for e in starts] == [
        ("torch", comm, 2)] * 2
    servers = 0 if cell.engine == "torch-ddp" else 2 if cell.placement == "colocated" else 1
    logs = sorted(p.name for p in (cell_dir / "logs").iterdir())
    assert logs == [f"server-{i}.log" for i in range(servers)] + ["worker-0.log",
                                                                  "worker-1.log"]
    assert no_children_left() == []


def test_parameter_server_and_allreduce_make_the_same_update(two_workers):
    """Sync on a parameter server (one server, or the parameters sliced over two) and DDP
    average the same gradients of the same shards from the same initial weights, and
    SGD on the server is SGD on each worker: the training losses agree to float
    rounding (measured: bit for bit on LeNet-MLP)."""
    losses = {name: two_workers[name][0]["train_loss_per_epoch"]
              for name in ("ps-sync", "ps-sync-colocated", "ddp")}
    for name, values in losses.items():
        assert values == pytest.approx(losses["ps-sync"], rel=1e-5), (name, losses)
    assert two_workers["ps-async"][0]["train_loss_per_epoch"] != losses["ps-sync"]


@pytest.mark.parametrize("name", list(TWO_WORKERS))
def test_every_step_is_broken_down_and_traced(two_workers, name):
    """torch times every step: 2 workers x 20 steps, the run's first step out; the
    phases add up to the step time measured from the epochs (the loop's own few lines
    and the epoch's end are all they miss), the exchange is split into comm and wait,
    the servers timed every round, and the cell has a valid trace."""
    from profiler.timeline.trace import check_trace
    from workloads.steps import read_steps

    rec, cell_dir = two_workers[name]
    cell = TWO_WORKERS[name]
    assert rec["breakdown"] == "every step" and rec["breakdown_steps"] == 2 * 20 - 2
    parts = sum(rec[f"{phase}_ms_mean"] for phase in ("data", "compute", "comm", "wait"))
    assert parts == pytest.approx(rec["steady_step_ms"], rel=0.15)
    assert 0.85 < rec["breakdown_vs_step"] <= 1.05
    assert rec["compute_ms_mean"] > 0 and rec["comm_ms_mean"] > 0
    assert set(rec["worker_nodes"]) == {"0", "1"}
    assert rec["slowest_worker"] in rec["worker_nodes"].values()
    assert set(rec["wait_ms_by_worker"]) == {"0", "1"}
    lines = read_steps(cell_dir / "events" / "steps-worker-1.jsonl")
    assert [(line["epoch"], line["step"]) for line in lines] == [
        (e, s) for e in (1, 2) for s in range(10)]
    for line in lines:
        assert line["data_s"] + line["compute_s"] + line["exchange_s"] == pytest.approx(
            line["step_s"], rel=0.05, abs=2e-4)
    servers = sorted((cell_dir / "events").glob("steps-server-*.jsonl"))
    if cell.engine == "torch-ddp":
        assert servers == [] and rec["server_update_ms_mean"] is None
    else:
        rounds = [len(read_steps(path)) for path in servers]
        # sync: one round per step; async: one per push, every worker's.
        assert rounds == [20 if cell.sync == "sync" else 40] * len(servers)
        assert rec["server_update_ms_mean"] > 0
    trace = json.loads((cell_dir / "trace.json").read_text())
    assert rec["trace_file"].endswith("trace.json")
    assert check_trace(trace) == []


def test_replicate_gives_every_worker_the_whole_set(two_workers):
    rec, cell_dir = two_workers["ddp-replicate"]
    assert rec["status"] == "ok", rec["reason"]
    assert rec["data_partition"] == "replicate"
    starts = [_events(cell_dir, rank)[0] for rank in (0, 1)]
    # Both workers hold all 640 samples, the same ones (in their own order): 20 steps an
    # epoch each, as one device takes, where the sharded cell's workers take 10.
    assert [(e["worker_samples"], e["train_samples"]) for e in starts] == [(640, 640)] * 2
    assert starts[0]["data_digest"] == starts[1]["data_digest"]
    assert rec["syncs_per_worker"] == 20
    sharded = [_events(two_workers["ddp"][1], rank)[0] for rank in (0, 1)]
    assert [e["worker_samples"] for e in sharded] == [320, 320]
    assert sharded[0]["data_digest"] != sharded[1]["data_digest"]
    # Times per sample count the training set once: per worker's sample when replicated.
    epoch = _events(cell_dir, 0)[2]
    steady = (epoch["epoch_s"] - epoch["first_step_s"]) / (19 * 32)
    assert rec["steady_s_per_sample"] == pytest.approx(steady, rel=1e-3)


def test_one_device_trains_alone(tmp_path):
    _need_torch()
    cell = _cell(devices=1, max_samples=320, epochs=2)
    rec = _run(tmp_path, cell)
    assert rec["status"] == "ok", rec["reason"]
    assert rec["syncs_per_worker"] == 20 and rec["val_accuracy"] > 0.3
    assert _events(tmp_path / cell.cell_id, 0)[0]["comm"] == "local"
    assert sorted(p.name for p in (tmp_path / cell.cell_id / "logs").iterdir()) == [
        "worker-0.log"]
