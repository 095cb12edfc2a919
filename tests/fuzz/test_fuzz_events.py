"""Fuzz: a cell's events and step files from outside (``events/worker-<rank>.jsonl``,
``events/steps-<role>-<rank>.jsonl``: written by training processes on the nodes and
fetched home), read as the cell runner reads them once a cell ends: its events'
columns, its training window, its step breakdown and trace.

Property: a line that is not a well-formed event or step is skipped; the breakdown may
fail only with ``OSError``/``ValueError`` (the record then names it in its reason,
``sweep.record``); no other exception escapes; the record's numbers are finite (a
diverged loss aside); nothing is written outside the cell's folder. ~5 s.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

from hypothesis import example, given, settings, strategies as st

from profiler.cell import CellConfig
from profiler.metrics.energy import cell_work
from profiler.sweep.events import epochs_done, read_cell_events
from profiler.timeline.record import breakdown_columns
from tests.fuzz.hostile import (DEEP_JSON, FUZZ, corrupted_text, line_of, mutated, snapshot,
                                writes_outside)

T = 1.0e9
START = {"event": "start", "t": T, "rank": 0, "num_workers": 1, "framework": "mxnet",
         "node": "n1", "breakdown": "on", "model": "lenet-mlp", "layers": None, "batch": 32,
         "dataset": "synthetic", "train_samples": 640, "steps_per_epoch": 20,
         "param_count": 1000, "classes": 10, "data_partition": "shard"}
FIRST = {"event": "first_step", "t": T + 0.5, "rank": 0}
EPOCH = {"event": "epoch", "t": T + 2, "rank": 0, "epoch": 1, "epoch_s": 1.5,
         "first_step_s": 0.1, "train_loss": 0.5, "train_loss_end": 0.4,
         "val_accuracy": 0.9, "samples": 640}
END = {"event": "end", "t": T + 3, "rank": 0, "elapsed_s": 3.0, "train_s": 1.5,
       "samples": 640, "samples_per_s": 426.0, "train_cpu_s": 1.4, "syncs": 20}
ERROR = {"event": "error", "t": T + 3, "rank": 0, "kind": "oom", "message": "out of memory"}
STEP = {"epoch": 1, "step": 5, "t": T + 1, "data_s": 0.0004, "compute_s": 0.031,
        "exchange_s": 0.012, "step_s": 0.0436}
SERVER = {"round": 5, "t": T + 1, "recv_s": 0.02, "update_s": 0.002, "send_s": 0.006}
CELL = CellConfig(model="lenet-mlp", layers=None)
CASES = {"events+steps": 0}
# A diverged loss is NaN or infinite by right: the divergence judge reads it.
LOSS_COLUMNS = {"train_loss_per_epoch"}


@st.composite
def cell_files(draw) -> dict[str, bytes]:
    def lines(*templates):
        chosen = draw(st.lists(st.sampled_from(templates), min_size=1, max_size=6))
        return [line_of(mutated(t, draw) if draw(st.booleans()) else t) for t in chosen]
    files = {"worker-0.jsonl": draw(corrupted_text(lines(START, FIRST, EPOCH, END, ERROR)))}
    if draw(st.booleans()):
        files["worker-1.jsonl"] = draw(corrupted_text(lines(START, EPOCH, END)))
    files["steps-worker-0.jsonl"] = draw(corrupted_text(lines(STEP)))
    if draw(st.booleans()):
        files["steps-worker-1.jsonl"] = draw(corrupted_text(lines(STEP)))
    if draw(st.booleans()):
        files["steps-server-0.jsonl"] = draw(corrupted_text(lines(SERVER)))
    return files


def _finite(value) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return all(map(_finite, value))
    if isinstance(value, dict):
        return all(map(_finite, value.values()))
    return True


def _files(**named) -> dict[str, bytes]:
    return {name.replace("_", "-") + ".jsonl": "".join(line_of(r) + "\n" for r in records
                                                      ).encode()
            for name, records in named.items()}


@settings(FUZZ, max_examples=120)
@given(cell_files())
@example(_files(worker_0=[START, {**EPOCH, "epoch": "one"}, END])
         ).via("an epoch number that is text")
@example(_files(worker_0=[START, {**EPOCH, "epoch_s": None}, END])
         ).via("an epoch without its time")
@example(_files(worker_0=[START, EPOCH, {**END, "samples_per_s": None}])
         ).via("an end whose rate is null (a worker with no training time writes it)")
@example(_files(worker_0=[{**START, "t": "now"}, EPOCH, END])).via("a time that is text")
@example(_files(worker_0=[START, EPOCH, {**END, "t": float("nan")}])).via("a NaN time")
@example(_files(worker_0=[START, EPOCH, {**END, "syncs": 10 ** 400}])
         ).via("an integer past a float's range")
@example(_files(worker_0=[{**START, "node": {"": None}}, EPOCH, END], steps_worker_0=[STEP])
         ).via("a node that is not a name (the rank's node is read from its start)")
@example(_files(worker_0=[START, EPOCH, END], steps_worker_0=[{**STEP, "every": "x"}])
         ).via("a step's sampling that is text")
@example(_files(worker_0=[START, EPOCH, END], steps_worker_0=[{**STEP, "data_s": "x"}])
         ).via("a step's phase time that is text")
@example(_files(worker_0=[START, EPOCH, END], steps_worker_0=[{**STEP, "data_s": None},
                                                              {**STEP, "exchange_s": None}])
         ).via("a step's phase times that are null (found by the fuzzer in CI)")
@example(_files(worker_0=[START, EPOCH, END], steps_worker_0=[{**STEP, "t": float("inf")}])
         ).via("a step at an infinite time")
@example({"worker-0.jsonl": (DEEP_JSON + "\n").encode(),
          "steps-worker-0.jsonl": (DEEP_JSON + "\n").encode()}).via("lines nested too deep")
@example({**_files(worker_0=[START, EPOCH, END]), "worker-99999999999999999999.jsonl": b"{}\n",
          "steps-worker-\u0661.jsonl": b"{}\n"}).via("ranks that are huge or not ASCII digits")
def test_events_and_steps_are_read_or_skipped(files):
    CASES["events+steps"] += 1
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cell_dir = root / "sweep" / "cells" / CELL.cell_id / "attempt-1"
        (cell_dir / "events").mkdir(parents=True)
        for name, data in files.items():
            (cell_dir / "events" / name).write_bytes(data)
        before = snapshot(root)
        events = read_cell_events(cell_dir / "events")
        columns = events.columns(T - 1)
        events.complete()
        events.error_of_kind("oom")
        events.train_window()
        cell_work(events, 1.0)
        epochs_done(cell_dir / "events")
        try:
            columns.update(breakdown_columns(CELL, cell_dir, events, [], None))
        except (OSError, ValueError):
            pass  # named in the record's reason by sweep.record
        json.dumps(columns, default=str)
        bad = {k: v for k, v in columns.items() if k not in LOSS_COLUMNS and not _finite(v)}
        assert not bad, bad
        assert writes_outside(before, snapshot(root), cell_dir) == []


def teardown_module() -> None:
    print(f"\nfuzz cases: {json.dumps(CASES)}")
