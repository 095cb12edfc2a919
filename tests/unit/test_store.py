"""The append-only results store and its CSV table."""

import csv
import json

from profiler.sweep.store import ResultsStore
from profiler.sweep.table import format_table


def _record(cell_id, status, **kw):
    return {"cell_id": cell_id, "sweep_id": "s", "status": status, "model": "resnet",
            "epoch_s": [1.5, 1.25], **kw}


def test_append_keeps_history_and_csv_shows_latest(tmp_path):
    store = ResultsStore(tmp_path, monitored=True)
    store.append(_record("a", "failed", reason="interrupted"))
    store.append(_record("b", "ok", cpu_percent_mean=41.0))
    store.append(_record("a", "ok"))
    assert len(store.records()) == 3
    assert store.finished_ids() == {"a", "b"}
    rows = list(csv.DictReader(open(tmp_path / "results.csv")))
    assert [(r["cell_id"], r["status"]) for r in rows] == [("a", "ok"), ("b", "ok")]
    assert rows[0]["epoch_s"] == "1.5;1.25" and rows[1]["cpu_percent_mean"] == "41"


def test_torn_last_line_is_ignored(tmp_path):
    store = ResultsStore(tmp_path)
    store.append(_record("a", "ok"))
    with open(store.jsonl_path, "a") as fh:
        fh.write('{"cell_id": "b", "sta')
    assert [r["cell_id"] for r in store.records()] == ["a"]


def test_failed_cells_are_not_final(tmp_path):
    store = ResultsStore(tmp_path)
    for cid, status in [("a", "ok"), ("b", "oom"), ("c", "timeout"), ("d", "failed")]:
        store.append(_record(cid, status))
    assert store.finished_ids() == {"a", "b", "c"}
    assert json.loads(store.jsonl_path.read_text().splitlines()[0])["cell_id"] == "a"


def test_table_formats_missing_values():
    text = format_table([_record("a", "ok", elapsed_s=12.345, val_accuracy=0.9712),
                         _record("b", "failed")])
    lines = text.splitlines()
    assert "elapsed_s" in lines[0] and set(lines[1]) <= {"-", " "}
    assert "12.3" in lines[2] and "0.971" in lines[2]
    assert " - " in lines[3]


def test_table_shows_the_cells_processes_memory_and_the_nodes_apart():
    """``mem_MB`` is the worker processes' RSS (what the model takes); on the local cluster
    the node's used memory is the whole host's, so it has a column of its own."""
    lines = format_table([_record("a", "ok", rss_mb_mean=185.4, mem_used_mb_mean=5120.2,
                                  rss_mb_peak=190.0)]).splitlines()
    row = dict(zip(lines[0].split(), lines[2].split()))
    assert (row["mem_MB"], row["node_mem_MB"]) == ("185", "5120")



def test_append_after_a_torn_line_keeps_the_next_record(tmp_path):
    """A crash mid-append leaves a torn line; the next record must not be glued to it."""
    store = ResultsStore(tmp_path)
    store.append(_record("a", "ok"))
    with open(store.jsonl_path, "a") as fh:
        fh.write('{"cell_id": "b", "sta')
    store.append(_record("c", "ok"))
    assert [r["cell_id"] for r in store.records()] == ["a", "c"]
    assert store.jsonl_path.read_text().endswith("}\n")


def test_torn_first_line_is_cut_too(tmp_path):
    store = ResultsStore(tmp_path)
    store.jsonl_path.write_text('{"cell_id": "a", "st')
    store.append(_record("b", "ok"))
    assert [r["cell_id"] for r in store.records()] == ["b"]
