"""Divergence: judged from the workers' training losses (``judge``), recorded in the results
(strict JSON, ``true``/``false`` in the CSV), marked in the table and listed by the CLI."""

from __future__ import annotations

import csv
import json
import math

import pytest
from click.testing import CliRunner

from profiler.cli import cli
from profiler.sweep.divergence import MIN_JUDGED_STEPS, judge, loss_per_epoch
from profiler.sweep.events import read_cell_events
from profiler.sweep.store import ResultsStore
from profiler.sweep.table import format_table
from workloads.events import EventWriter

UNIFORM = math.log(10)  # the loss of a uniform guess over ten classes


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


@pytest.mark.parametrize("end,diverged", [
    (UNIFORM, True), (UNIFORM + 1e-9, True), (UNIFORM - 1e-6, False), (5.0, True),
])
def test_epoch_one_ending_at_or_above_ln10_is_diverged(end, diverged):
    verdict, reason = judge({0: _epochs(2.5, 1.0, end=[end, 0.9])})
    assert verdict is diverged
    if diverged:
        assert reason.startswith("diverged: epoch 1 ended with training loss")
        assert f"{end:.3f}" in reason and "ln(10) = 2.303" in reason and "lower --lr" in reason
    else:
        assert reason is None


def test_later_epochs_above_ln10_do_not_count_only_non_finite_ones_do():
    # Judged on epoch 1's end; a later rise is the model's business, a NaN is not.
    assert judge({0: _epochs(1.0, 3.0)}) == (False, None)
    assert judge({0: _epochs(1.0, 3.0, float("-inf"))})[0] is True


def test_without_an_end_loss_the_epoch_mean_is_used():
    events = [{"event": "epoch", "epoch": 1, "train_loss": 2.5}]
    diverged, reason = judge({0: events})
    assert diverged is True and "2.500" in reason
    assert judge({0: [{"event": "epoch", "epoch": 1, "train_loss": 0.5}]}) == (False, None)


def test_the_end_of_epoch_one_counts_not_its_mean():
    # A first epoch that starts at chance but ends well below it has learned.
    assert judge({0: _epochs(2.5, 1.0, end=[1.4, 0.9])}) == (False, None)


def test_nothing_to_judge_without_epochs():
    assert judge({}) == (None, None)
    assert judge({0: []}) == (None, None)
    assert judge({0: [], 1: []}) == (None, None)
    # Epochs without any loss (a worker of an older edgeprof): nothing to judge either.
    assert judge({0: [{"event": "epoch", "epoch": 1}]}) == (None, None)


def test_a_non_finite_end_loss_alone_is_diverged():
    diverged, reason = judge({0: _epochs(1.0, end=[float("nan")])})
    assert diverged is True and "nan in epoch 1 (worker 0)" in reason


def test_the_first_non_finite_epoch_is_named():
    diverged, reason = judge({0: _epochs(1.0, 0.5, float("inf")),
                              1: _epochs(1.0, float("nan"), float("nan"))})
    assert diverged is True and reason == "diverged: training loss nan in epoch 2 (worker 1)"


def test_loss_per_epoch_is_the_mean_over_workers_and_non_finite_as_text():
    assert loss_per_epoch({0: _epochs(1.0, 0.5), 1: _epochs(2.0, 0.7)}) == [1.5, 0.6]
    assert loss_per_epoch({0: _epochs(1.0, float("nan")), 1: _epochs(1.0, 0.7)}) == [1.0, "nan"]
    assert loss_per_epoch({0: _epochs(1.0), 1: []}) == [1.0]
    assert loss_per_epoch({0: _epochs(float("inf"))}) == ["inf"]
    assert loss_per_epoch({}) == []


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


def test_a_workers_nan_loss_becomes_a_diverged_strict_json_record(tmp_path):
    """The real path: the worker writes NaN into its events (Python's json does), the
    runner's columns turn it into text, and the stored record is strict JSON."""
    events_dir = tmp_path / "events"
    for rank, losses in ((0, [2.0, float("nan")]), (1, [2.1, 1.5])):
        writer = EventWriter(events_dir, rank)
        writer.emit("start", num_workers=2, train_samples=64, lr_applied=0.04)
        writer.emit("first_step")
        for epoch, loss in enumerate(losses, 1):
            writer.emit("epoch", epoch=epoch, epoch_s=1.0, val_accuracy=0.1, train_loss=loss,
                        train_loss_end=loss)
        writer.emit("end", samples=64, samples_per_s=10.0, syncs=2)
        writer.close()
    assert "NaN" in (events_dir / "worker-0.jsonl").read_text()
    columns = read_cell_events(events_dir).columns(t_launch=0.0)
    assert columns["diverged"] is True and columns["lr_applied"] == 0.04
    assert columns["divergence"] == "diverged: training loss nan in epoch 2 (worker 0)"
    assert columns["train_loss_per_epoch"] == [2.05, "nan"]
    store = ResultsStore(tmp_path)
    store.append({"sweep_id": "s", "cell_id": "c", "status": "ok", **columns})
    line = store.jsonl_path.read_text()
    json.loads(line, parse_constant=lambda name: pytest.fail(f"{name} in the record"))
    row = next(csv.DictReader(open(tmp_path / "results.csv")))
    assert row["diverged"] == "true" and row["train_loss_per_epoch"] == "2.05;nan"
    assert row["lr_applied"] == "0.04"


def test_a_cell_without_epochs_leaves_diverged_empty_in_the_csv(tmp_path):
    store = ResultsStore(tmp_path)
    store.append({"sweep_id": "s", "cell_id": "c", "status": "failed", "diverged": None})
    assert next(csv.DictReader(open(tmp_path / "results.csv")))["diverged"] == ""
    assert "diverged" not in format_table(store.records()).splitlines()[2]


def test_the_cli_lists_diverged_cells_after_the_table(tmp_path, monkeypatch):
    import profiler.sweep.sweep
    from profiler.sweep.sweep import SweepOutcome

    records = [
        {"cell_id": "aaa", "model": "lenet-mlp", "status": "ok", "val_accuracy": 0.1,
         "diverged": True, "reason": "diverged: training loss nan in epoch 1 (worker 0)"},
        {"cell_id": "bbb", "model": "lenet-mlp", "status": "ok", "val_accuracy": 0.9,
         "diverged": False},
    ]
    monkeypatch.setattr(profiler.sweep.sweep, "run_sweep", lambda settings, **kw: SweepOutcome(
        "s", tmp_path / "out", records))
    result = CliRunner().invoke(cli, ["sweep", "--model", "lenet-mlp", "--dataset", "synthetic",
                                      "--out", str(tmp_path / "out"), "--no-agent"])
    assert result.exit_code == 0, result.output
    assert "ok,diverged" in result.stdout and "0.100!" in result.stdout
    assert ("diverged: aaa diverged: training loss nan in epoch 1 (worker 0)"
            in result.stderr.splitlines())
    assert "bbb" not in result.stderr


def test_an_epoch_too_short_to_learn_is_not_judged_unless_its_loss_is_not_finite():
    # The study's cut-down cells: three steps a worker time the system, nothing more.
    assert judge({0: _epochs(2.4, end=[6.97])}, steps_per_epoch=3) == (None, None)
    assert judge({0: _epochs(float("nan"))}, steps_per_epoch=3)[0] is True
    assert judge({0: _epochs(2.4, end=[6.97])}, steps_per_epoch=MIN_JUDGED_STEPS)[0] is True


def test_the_uniform_guess_is_the_datas_own_and_a_scripts_loss_is_not_judged():
    """100 classes: a loss of 3.0 is below ln(100) = 4.6 (learning); a script's loss of
    unknown meaning is judged only when it is not finite."""
    epochs = {0: [{"epoch": 1, "train_loss": 3.0, "train_loss_end": 3.0}]}
    assert judge(epochs, classes=100, steps_per_epoch=50) == (False, None)
    assert judge(epochs, classes=10, steps_per_epoch=50)[0] is True
    assert judge(epochs, classes=None, steps_per_epoch=50) == (False, None)
    nan = {0: [{"epoch": 1, "train_loss": float("nan")}]}
    assert judge(nan, classes=None, steps_per_epoch=50)[0] is True
