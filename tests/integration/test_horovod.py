"""Real Horovod (Gloo) trainings: the plan, 2-worker runs through the cell runner, and a
sweep mixing the MXNet parameter server and Horovod through the ``edgeprof`` command.

Every process is real: Horovod's rendezvous server in the launcher, one worker per local
slot talking Gloo over loopback.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from profiler.cluster.base import Node, NodeScope
from profiler.cluster.local import LocalCluster
from profiler.engines.base import TrainOptions
from profiler.engines.horovod import HorovodEngine
from profiler.errors import ClusterError, ConfigError
from profiler.sweep.grid import CellConfig, validate
from profiler.sweep.runner import run_cell
from tests.conftest import need, no_children_left

pytestmark = pytest.mark.integration
TINY = TrainOptions(val_samples=200)


def _need_horovod() -> None:
    need("Horovod built with MXNet (docs/horovod.md)",
         importlib.util.find_spec("horovod") is not None
         and importlib.util.find_spec("horovod.mxnet") is not None)


def _cell(**kw) -> CellConfig:
    return validate(CellConfig(**{"engine": "horovod", "devices": 2, "batch": 32,
                                  "max_samples": 640, **kw}))



def test_plan_is_a_rendezvous_and_one_worker_per_node(tmp_path):
    _need_horovod()
    cell = _cell(model="lenet-mlp", layers=None, devices=3)
    nodes = [Node(f"n{i}", address=f"10.9.0.{i + 1}", scope=NodeScope(interfaces=("eth0",)))
             for i in range(3)]
    specs = HorovodEngine().plan(cell, nodes, tmp_path, TINY)
    launcher, workers = specs[0], specs[1:]
    assert (launcher.role, launcher.node.name, launcher.decisive) == ("launcher", "n0", False)
    assert launcher.argv[launcher.argv.index("--hosts") + 1] == "n0:1,n1:1,n2:1"
    port = launcher.argv[launcher.argv.index("--port") + 1]
    assert [(w.role, w.rank, w.node.name, w.decisive) for w in workers] == [
        ("worker", r, f"n{r}", True) for r in range(3)]
    for w in workers:
        assert w.argv[w.argv.index("--comm") + 1] == "allreduce"
        assert w.env["HOROVOD_GLOO_RENDEZVOUS_ADDR"] == "10.9.0.1"
        assert w.env["HOROVOD_GLOO_RENDEZVOUS_PORT"] == port
        assert w.env["HOROVOD_GLOO_IFACE"] == "eth0"
        assert w.env["HOROVOD_RANK"] == str(w.rank) and w.env["HOROVOD_SIZE"] == "3"
        # Each node is its own Horovod host: one slot, ranks spread across hosts.
        assert (w.env["HOROVOD_HOSTNAME"], w.env["HOROVOD_LOCAL_SIZE"],
                w.env["HOROVOD_CROSS_SIZE"]) == (w.node.name, "1", "3")


def test_async_is_refused_and_the_plan_needs_an_interface(tmp_path):
    _need_horovod()
    engine = HorovodEngine()
    async_cell = CellConfig(engine="horovod", model="lenet-mlp", layers=None, devices=2,
                            sync="async")
    # The engine declares its sync modes; the grid refuses the rest before any plan.
    with pytest.raises(ConfigError, match="horovod trains sync only"):
        validate(async_cell)
    bare = [Node("a", address="10.9.0.1"), Node("b", address="10.9.0.2")]
    with pytest.raises(ClusterError, match=r"NodeScope\(interfaces=\.\.\.\)"):
        engine.plan(_cell(model="lenet-mlp", layers=None), bare, tmp_path, TINY)


@pytest.mark.parametrize("model, layers, epochs", [("lenet-mlp", None, 2), ("resnet", 20, 1)])
def test_two_horovod_workers_train(tmp_path, model, layers, epochs):
    _need_horovod()
    cell = _cell(model=model, layers=layers, epochs=epochs)
    cell_dir = tmp_path / cell.cell_id
    rec = run_cell(cell, LocalCluster(2), HorovodEngine(), cell_dir, TINY, sweep_id="t",
                   timeout_s=240, monitor_interval_s=None)
    assert rec["status"] == "ok", rec["reason"]
    assert rec["engine"] == "horovod"
    # 640 samples split between 2 workers, batch 32: 10 allreduce steps each per epoch.
    assert rec["syncs_per_worker"] == 10 * epochs
    assert len(rec["epoch_s"]) == epochs and rec["samples_per_s"] > 0
    if model == "lenet-mlp":  # ten classes: chance is 0.1
        assert rec["val_accuracy"] > 0.3
    else:
        assert 0.0 <= rec["val_accuracy"] <= 1.0
    starts = [json.loads(line) for rank in (0, 1)
              for line in (cell_dir / "events" / f"worker-{rank}.jsonl").read_text().splitlines()
              if json.loads(line).get("event") == "start"]
    assert [(e["comm"], e["num_workers"]) for e in starts] == [("allreduce", 2)] * 2
    logs = sorted(p.name for p in (cell_dir / "logs").iterdir())
    assert logs == ["launcher-0.log", "worker-0.log", "worker-1.log"]
    assert no_children_left() == []


def test_sweep_mixes_parameter_server_and_horovod(tmp_path):
    _need_horovod()
    out = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "profiler.cli", "sweep", "--engine", "mxnet,horovod",
           "--model", "lenet-mlp", "--devices", "2", "--batch", "32", "--max-samples", "512",
           "--val-samples", "200", "--interval", "0.5", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert sorted(r["engine"] for r in rows) == ["horovod", "mxnet"]
    for r in rows:
        assert r["status"] == "ok", r["reason"]
        # Same cluster, model and batch: the same number of syncs per worker.
        assert float(r["syncs_per_worker"]) == 512 // 2 // 32
        assert float(r["samples_per_s"]) > 0 and float(r["val_accuracy"]) > 0.3
    # ``engine`` also tags every metric the agents spooled for the Horovod cell.
    hvd_cell = next(r["cell_id"] for r in rows if r["engine"] == "horovod")
    spools = list(Path(out, "cells", hvd_cell, "attempt-1", "metrics").rglob("*.lp"))
    assert spools and all('"engine": "horovod"' in p.read_text() for p in spools)
    assert "horovod" in proc.stdout and "mxnet" in proc.stdout
