"""A cell's status is one enum (``profiler.status.Status``), and records stay as they
were: a member is written as its string to results.jsonl and results.csv, and a record
read back compares equal to the member."""

from __future__ import annotations

import csv
import json

from profiler.status import FINAL, Status
from profiler.sweep.store import ResultsStore


def test_a_status_is_written_as_its_string_and_reads_back_equal(tmp_path):
    store = ResultsStore(tmp_path)
    store.append({"cell_id": "a", "sweep_id": "s", "status": Status.TIMEOUT,
                  "reason": "no result within --timeout 5 s"})
    store.append({"cell_id": "b", "sweep_id": "s", "status": Status.FAILED})
    line = (tmp_path / "results.jsonl").read_text().splitlines()[0]
    assert json.loads(line)["status"] == "timeout" and '"status": "timeout"' in line
    with open(tmp_path / "results.csv", newline="") as fh:
        assert [row["status"] for row in csv.DictReader(fh)] == ["timeout", "failed"]
    assert store.latest()["a"]["status"] == Status.TIMEOUT
    assert store.finished_ids() == {"a"}  # failed cells run again on --resume


def test_the_statuses_and_which_are_final():
    assert [str(s) for s in Status] == ["ok", "oom", "timeout", "failed"]
    assert Status.FAILED not in FINAL and set(FINAL) == {"ok", "oom", "timeout"}
