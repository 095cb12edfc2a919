"""The user's own data trains through the real command: real Fashion-MNIST exported to an
``.npz`` and to a folder of PNGs, ``edgeprof sweep --dataset PATH`` on the local cluster,
a user's model (``examples/cnn_model.py:make_model``, ``--model PATH.py:FACTORY``) on the
torch parameter server (sync and async) and on torch-ddp, two devices, two epochs, every
process a real ``workloads.train`` over loopback.

Each format must learn (accuracy above chance, 0.3 for ten classes), the results must
name the data and its digest, and the worker must have read the staged file. A second
run of the folder's sweep with ``--resume`` finds every cell done without decoding the
folder again (the converted file is cached and its digest is the same).
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, need
from tests.unit.test_user_data import export_folder, export_npz, fashion
from workloads.datasets import user

pytestmark = pytest.mark.integration
CHANCE = 0.3  # "above chance" for ten classes, with a margin for two short epochs
USER_MODEL = f"{ROOT / 'examples' / 'cnn_model.py'}:make_model"


def _sweep(dataset: Path, out: Path, cache: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, user.CACHE_ENV: str(cache),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    argv = [sys.executable, "-m", "profiler.cli", "sweep", "--cluster", "local",
            "--engine", "torch,torch-ddp", "--model", USER_MODEL, "--devices", "2",
            "--sync", "sync,async", "--epochs", "2", "--batch", "32", "--dataset",
            str(dataset), "--out", str(out), "--no-agent", *extra]
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=out.parent,
                          timeout=300)


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict:
    need("torch (scripts/setup.sh installs its CPU build)",
         importlib.util.find_spec("torch") is not None)
    base = tmp_path_factory.mktemp("user-data")
    data = fashion(3000, 500)
    per_class = np.bincount(data["train"][1])
    return {"npz": export_npz(base / "fashion.npz", data, nhwc=True),
            # 3,000 PNGs: every 6th image of a class held out, the rest to train.
            "folder": export_folder(base / "fashion-png", data),
            "train": {"npz": 3000, "folder": int((per_class - per_class // 6).sum())}}


@pytest.mark.parametrize("fmt", ["npz", "folder"])
def test_user_data_trains_on_the_parameter_server_and_ddp(fmt, exported, tmp_path):
    cache = tmp_path / "cache"
    proc = _sweep(exported[fmt], tmp_path / "out", cache)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = list(csv.DictReader(open(tmp_path / "out" / "results.csv")))
    assert {(r["engine"], r["sync"]) for r in rows} == {
        ("torch", "sync"), ("torch", "async"), ("torch-ddp", "sync")}
    staged = list((tmp_path / "out" / "inputs").iterdir())
    staged = [path for path in staged if path.name.startswith("dataset-")]
    assert len(staged) == 1  # beside the model file
    label = exported[fmt].name
    for row in rows:
        assert row["status"] == "ok", row["reason"]
        assert float(row["val_accuracy"]) > CHANCE, row
        assert row["dataset"] == label and row["model"] == "cnn_model.py:make_model"
        assert staged[0].name == f"dataset-{row['data_digest'][:12]}.npz"
        assert len(row["data_digest"]) == 64
        assert int(row["train_samples"]) == exported["train"][fmt]
    if fmt == "folder":
        assert "decoding fashion-png" in proc.stderr  # 3,000 images: a progress bar
        again = _sweep(exported[fmt], tmp_path / "out", cache, "--resume")
        assert again.returncode == 0, again.stderr[-3000:]
        assert "3 cell(s) already done, skipped" in again.stdout
        assert "decoding" not in again.stderr


def test_a_set_of_five_classes_builds_five_outputs_on_workers_and_server(exported, tmp_path):
    """The parameter server builds its model without data: from the staged file's classes,
    as the workers do (a mismatch would leave the two sides exchanging different sizes)."""
    with np.load(exported["npz"]) as archive:
        keep = archive["y_train"] < 5
        keep_test = archive["y_test"] < 5
        np.savez(tmp_path / "five.npz", x_train=archive["x_train"][keep],
                 y_train=archive["y_train"][keep], x_test=archive["x_test"][keep_test],
                 y_test=archive["y_test"][keep_test])
    out = tmp_path / "out"
    # Two epochs: after one, an async cell on a loaded host learned 0.4 or less (CI).
    proc = _sweep(tmp_path / "five.npz", out, tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert all(r["status"] == "ok" and float(r["val_accuracy"]) > 0.4 for r in rows), rows
    starts = [json.loads(line) for path in out.glob("cells/*/attempt-1/events/worker-0.jsonl")
              for line in path.read_text().splitlines() if '"start"' in line]
    # The example CNN's 105,866 parameters with its last layer 64 x 5 + 5, not 64 x 10 + 10.
    assert [s["param_count"] for s in starts] == [105866 - 5 * 65] * 3
