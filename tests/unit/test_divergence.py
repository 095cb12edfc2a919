"""Divergence: judged from the workers' training losses, recorded, and shown in the table."""

from __future__ import annotations

import csv
import json
import math

import pytest

from profiler.sweep.divergence import judge, loss_per_epoch
from profiler.sweep.store import ResultsStore
from profiler.sweep.table import format_table


def _epochs(*losses, end=None):
    """One worker's epoch events: train_loss per epoch, train_loss_end = end or the same."""
    return [{"event": "epoch", "epoch": i + 1, "train_loss": loss,
             "train_loss_end": (end[i] if end else loss)} for i, loss in enumerate(losses)]


def test_a_run_that_learns_is_not_diverged():
    assert judge({0: _epochs(1.2, 0.6), 1: _epochs(1.3, 0.7)}) == (False, None)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_loss_names_the_epoch_and_worker(bad):
    diverged, reason = judge({0: _epochs(1.2, 0.6, 0.5), 1: _epochs(1.2, 0.6, bad)})
    assert diverged is True
    assert "epoch 3" in reason and "worker 1" in reason and str(bad) in reason


def test_first_epoch_not_below_a_uniform_guess_is_diverged():
    uniform = math.log(10)
    diverged, reason = judge({0: _epochs(2.4, 1.0, end=[2.31, 0.9]),
                              1: _epochs(2.4, 1.0, end=[2.35, 0.9])})
    assert diverged is True
    assert "epoch 1" in reason and "2.330" in reason and f"{uniform:.3f}" in reason


def test_the_end_of_epoch_one_counts_not_its_mean():
    # A first epoch that starts at chance but ends well below it has learned.
    assert judge({0: _epochs(2.5, 1.0, end=[1.4, 0.9])}) == (False, None)


def test_nothing_to_judge_without_epochs():
    assert judge({}) == (None, None)
    assert judge({0: []}) == (None, None)


def test_loss_per_epoch_is_the_mean_over_workers_and_non_finite_as_text():
    assert loss_per_epoch({0: _epochs(1.0, 0.5), 1: _epochs(2.0, 0.7)}) == [1.5, 0.6]
    assert loss_per_epoch({0: _epochs(1.0, float("nan")), 1: _epochs(1.0, 0.7)}) == [1.0, "nan"]
    assert loss_per_epoch({0: _epochs(1.0), 1: []}) == [1.0]


def test_store_and_table_mark_a_diverged_cell(tmp_path):
    store = ResultsStore(tmp_path)
    base = {"sweep_id": "s", "model": "lenet-cnn", "status": "ok", "val_accuracy": 0.096}
    store.append({**base, "cell_id": "a", "diverged": True, "train_loss_per_epoch": ["nan"],
                  "reason": "diverged: training loss nan in epoch 1 (worker 0)"})
    store.append({**base, "cell_id": "b", "diverged": False, "val_accuracy": 0.85})
    rows = {r["cell_id"]: r for r in csv.DictReader(open(tmp_path / "results.csv"))}
    assert rows["a"]["diverged"] == "true" and rows["b"]["diverged"] == "false"
    assert rows["a"]["train_loss_per_epoch"] == "nan"
    for line in store.jsonl_path.read_text().splitlines():  # strict JSON: no NaN token
        json.loads(line, parse_constant=lambda name: pytest.fail(f"{name} in the record"))
    table = format_table(store.records()).splitlines()
    assert "ok,diverged" in table[2] and "0.096!" in table[2]
    assert "diverged" not in table[3] and "0.850" in table[3] and "!" not in table[3]
