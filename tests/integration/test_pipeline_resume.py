"""``--resume`` of a sweep with ``torch-pipe`` cells, on the local cluster, through the CLI.

A pipeline cell's identity includes its engine's own settings (micro-batches, schedule,
replicas, split): a resumed sweep skips the pipeline cells already done, runs a new
schedule as a new cell, and a resume with nothing new runs nothing and keeps every
record and attempt folder as it was.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT, need, no_children_left

pytestmark = pytest.mark.integration
EDGEPROF = [sys.executable, "-m", "profiler.cli"]


@pytest.fixture(autouse=True)
def _torch():
    need("torch (scripts/setup.sh installs its CPU build)",
         importlib.util.find_spec("torch") is not None)


def _sweep(out, *extra: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [*EDGEPROF, "sweep", "--engine", "torch-pipe", "--model", "lenet-cnn",
         "--dataset", "synthetic", "--devices", "2", "--batch", "32", "--microbatches", "2",
         "--max-samples", "128", "--val-samples", "64", "--out", str(out), *extra],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _records(out) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def test_resume_skips_the_pipeline_cells_done_and_runs_a_new_schedule(tmp_path):
    out = tmp_path / "sweep"
    _sweep(out, "--schedule", "gpipe")
    first = _records(out)
    assert [(r["schedule"], r["status"]) for r in first] == [("gpipe", "ok")], first

    # The GPipe cell is done: skipped; 1F1B is a cell of its own, run now.
    done = _sweep(out, "--schedule", "gpipe,1f1b", "--resume")
    assert "1 cell(s) already done, skipped" in done.stdout, done.stdout
    records = _records(out)
    assert records[0] == first[0]
    assert [(r["schedule"], r["status"]) for r in records[1:]] == [("1f1b", "ok")], records
    assert records[1]["cell_id"] != first[0]["cell_id"]
    assert records[1]["pipe_split"] and records[1]["microbatches"] == 2
    cells = out / "cells"
    # One attempt each: the skipped cell was not started again.
    assert sorted(p.name for p in (cells / first[0]["cell_id"]).iterdir()) == ["attempt-1"]

    # Nothing new: both skipped, nothing run, the records as they were.
    done = _sweep(out, "--schedule", "1f1b,gpipe", "--resume")
    assert "2 cell(s) already done, skipped" in done.stdout, done.stdout
    assert _records(out) == records
    for record in records:
        assert [p.name for p in (cells / record["cell_id"]).iterdir()] == ["attempt-1"]
    with open(out / "results.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [(row["schedule"], row["microbatches"]) for row in rows] == [("gpipe", "2"),
                                                                       ("1f1b", "2")]
    no_children_left()
