"""A real cell's record against ``profiler.results_schema``: a tiny sweep on the local
cluster (torch, LeNet-MLP, 2 devices sharded, 2 epochs, agents on, step breakdown on,
``--price``) writes only columns the schema has, each of its type, and results.csv's
header is the schema's.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from profiler import results_schema
from tests.conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
TRAIN = 256
EPOCHS = 2
_TYPES = {"str": str, "int": int, "float": (int, float), "bool": bool, "list": list,
          "map": dict}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("schema") / "sweep"
    done = subprocess.run(
        [sys.executable, "-m", "profiler.cli", "sweep", "--engine", "torch",
         "--model", "lenet-mlp", "--batch", "32", "--devices", "2",
         "--max-samples", str(TRAIN), "--val-samples", "200", "--epochs", str(EPOCHS),
         "--interval", "0.5", "--out", str(out), "--price", "host=0.5"],
        cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def test_every_key_of_the_record_is_a_schema_column_of_its_type(sweep):
    (record,) = [json.loads(line) for line in (sweep / "results.jsonl").read_text().splitlines()]
    assert record["status"] == "ok", record["reason"]
    from profiler import engines

    for name, value in record.items():
        column = results_schema.get(name, engines.columns())  # an engine's own too
        assert column is not None, f"the record's {name} is not in profiler.results_schema"
        if value is not None:
            assert isinstance(value, _TYPES[column.kind]), (name, value, column.kind)
            assert column.kind == "bool" or not isinstance(value, bool), (name, value)
    # Each worker trained its half of the set in each epoch: the set's size is not that.
    assert record["train_samples"] == TRAIN
    assert record["samples_trained"] == TRAIN * EPOCHS


def test_results_csv_has_every_schema_column_in_its_order(sweep):
    with open(sweep / "results.csv", newline="") as fh:
        header = next(csv.reader(fh))
    from profiler import engines

    # The engines' own settings after the configuration's, their columns after all.
    assert header == results_schema.csv_columns(monitored=True, extra=engines.columns())
    assert {c.name for c in results_schema.COLUMNS if c.csv} <= set(header)
