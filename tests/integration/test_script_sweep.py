"""``edgeprof sweep --script``: the example DDP script (examples/ddp_train.py, real
Fashion-MNIST) run unchanged by the controller, as a user runs it.

On the local cluster at 1, 2 and 4 devices: every cell ok, with the step breakdown, the
agent's columns, the script's accuracy and its ``--param`` as a column; ``--resume``
skips what is done and runs a changed script again; ``edgeprof report`` builds over the
sweep. On the emulated cluster (root) at 1, 2 and 4 devices: the same, the allreduce on the
nodes' own links. The same network through ``--model examples/cnn_model.py:make_model``
on torch-ddp takes about as long per step and learns the same (a loose margin here;
benchmarks/bench_script_vs_factory.py measures it).
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, emulated_nodes, need

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]
EXAMPLE = ROOT / "examples" / "ddp_train.py"
FACTORY = ROOT / "examples" / "cnn_model.py"
FASHION = Path("/usr/share/datasets/fashion-mnist")
# 512 images at batch 32: 16 steps an epoch on one device, 4 at four; 200 to validate.
SCRIPT_ARGS = ("--epochs {epochs} --batch {batch} --max-samples 512 --val-samples 200 "
               "--seed {seed}")


@pytest.fixture
def fashion():
    need("Debian dataset-fashion-mnist", (FASHION / "train-images-idx3-ubyte.gz").exists())


def _edgeprof(*args: str, timeout_s: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "profiler.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout_s,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def _sweep(out: Path, script: Path, *args: str) -> subprocess.CompletedProcess:
    done = _edgeprof("sweep", "--script", str(script), "--script-args", SCRIPT_ARGS,
                     "--batch", "32", "--interval", "0.5", "--out", str(out), *args)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def _check_ok(record: dict, out: Path, script: Path) -> None:
    """A script cell as every built-in cell: ok, timed, sampled, its accuracy kept."""
    assert record["status"] == "ok", record["reason"]
    assert record["engine"] == "script" and record["model"] == script.name
    assert record["model_digest"] == hashlib.sha256(script.read_bytes()).hexdigest()
    assert record["script_args"] == SCRIPT_ARGS and record["timeout_s"] == 1800
    # The breakdown: every step timed on every worker, allreduce counted past one device.
    assert record["breakdown"] == "every step"
    assert record["compute_ms_mean"] > 0 and record["step_ms_mean"] > 0
    assert (record["comm_ms_mean"] > 0) == (record["devices"] > 1)
    assert record["slowest_worker"] and (out / record["trace_file"]).is_file()
    # An agent sampled every worker's node; the script reported its epochs itself.
    nodes = set(record["worker_nodes"].values())
    assert record["metrics_nodes"] == record["devices"] == len(nodes)
    assert record["cpu_percent_mean"] is not None
    assert record["accuracy_reported"] is True and record["val_accuracy"] > 0.1
    assert len(record["epoch_s"]) == record["epochs"]
    assert record["samples_per_s"] > 0 and record["syncs_per_worker"] > 0


def _csv(out: Path) -> list[dict]:
    with open(out / "results.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def test_script_sweep_local_params_resume_and_report(fashion, tmp_path):
    script = tmp_path / "train.py"
    shutil.copy(EXAMPLE, script)
    out = tmp_path / "sweep"
    done = _sweep(out, script, "--devices", "1,2,4", "--param", "seed=7", "--epochs", "2")
    records = _records(out)
    assert [r["devices"] for r in records] == [1, 2, 4]
    for record in records:
        _check_ok(record, out, script)
        assert record["params"] == [["seed", "7"]]
    assert " seed " in done.stdout.splitlines()[0]  # the table's param column
    assert [row["param_seed"] for row in _csv(out)] == ["7", "7", "7"]
    # Each rank had a node of its own, and waited for the others at each allreduce.
    assert records[2]["worker_nodes"] == {str(r): f"local{r}" for r in range(4)}
    assert sorted(records[2]["wait_ms_by_worker"]) == ["0", "1", "2", "3"]

    _compare_with_the_factory(records[0], tmp_path / "factory")

    # --resume: the done cell is skipped, a new --param value is a new cell.
    done = _sweep(out, script, "--devices", "1", "--param", "seed=7,8", "--epochs", "2",
                  "--resume")
    assert "1 cell(s) already done, skipped" in done.stdout
    new = _records(out)[3:]
    assert [(r["devices"], r["params"]) for r in new] == [(1, [["seed", "8"]])]
    _check_ok(new[0], out, script)

    # A changed script is another cell (its digest), run again under --resume.
    script.write_text(script.read_text() + "\n# changed\n")
    done = _sweep(out, script, "--devices", "1", "--param", "seed=7", "--epochs", "2",
                  "--resume")
    assert "already done" not in done.stdout
    changed = _records(out)[4:]
    assert len(changed) == 1 and changed[0]["cell_id"] != records[0]["cell_id"]
    _check_ok(changed[0], out, script)

    report = _edgeprof("report", str(out))
    assert report.returncode == 0, report.stderr[-3000:]
    page = (out / "report.html").read_text()
    assert "train.py b32 x4 sync script seed=7" in page
    assert all(r["cell_id"] in page for r in records)


def _compare_with_the_factory(script_cell: dict, out: Path) -> None:
    """The script's network as a factory on torch-ddp, same data and settings (the
    script's defaults: lr 0.02, momentum 0.9, no weight decay): about the same time per
    step and the same loss curve. Loose margins, for a loaded machine (the benchmark
    measures the ratio in one run: benchmarks/bench_script_vs_factory.py)."""
    done = _edgeprof("sweep", "--model", f"{FACTORY}:make_model", "--engine", "torch-ddp",
                     "--dataset", "fashion-mnist", "--max-samples", "512", "--val-samples",
                     "200", "--batch", "32", "--epochs", "2", "--lr", "0.02", "--wd", "0",
                     "--devices", str(script_cell["devices"]), "--no-agent", "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    [factory] = _records(out)
    assert factory["status"] == "ok", factory["reason"]
    # The two runs are minutes apart, and the other xdist worker may load the machine during
    # one and not the other (CI saw 8.3 ms against 29.3 ms, 0.28x): this checks only that the
    # script's steps are timed in the same unit and range as the engine's (seconds for ms,
    # or an untimed step, are 1000x off). The ratio itself is the benchmark's to measure.
    assert 0.05 < script_cell["step_ms_mean"] / factory["step_ms_mean"] < 20
    for script_loss, factory_loss in zip(script_cell["train_loss_per_epoch"],
                                         factory["train_loss_per_epoch"], strict=True):
        assert script_loss == pytest.approx(factory_loss, rel=0.25)
    for cell in (script_cell, factory):
        losses = cell["train_loss_per_epoch"]
        assert losses[1] < losses[0] and cell["val_accuracy"] > 0.3


@pytest.fixture
def emulated_cluster():
    """The emulated cluster that is up (4 nodes at least), or one brought up here."""
    yield from emulated_nodes(4)


def test_script_sweep_on_the_emulated_cluster(fashion, emulated_cluster, tmp_path):
    out = tmp_path / "sweep"
    _sweep(out, EXAMPLE, "--cluster", "emulated", "--devices", "1,2,4", "--param", "seed=7")
    records = _records(out)
    assert [r["devices"] for r in records] == [1, 2, 4]
    for record in records:
        _check_ok(record, out, EXAMPLE)
        assert record["cluster"] == "emulated"
    # The allreduce crossed the nodes' own eth0 (the agent counts each node's interface).
    for record in records[1:]:
        assert record["net_sent_kb"] > 100 and record["net_recv_kb"] > 100
