"""The cell's rate that one slow moment cannot move (profiler.timeline.rate): from step
files and events written as workers write them, through the breakdown's record columns."""

from __future__ import annotations

import json

import pytest

from profiler.cell import CellConfig
from profiler.report.ratios import per_sample_s as _per_sample_s
from profiler.sweep import board_time
from profiler.sweep.events import read_cell_events
from profiler.timeline.rate import (BLOCK_S, BLOCKS_PER_EPOCH, SLOW_FACTOR, robust_columns,
                                    step_blocks, typical_s_per_step)
from profiler.timeline.record import breakdown_columns
from workloads.steps import steps_path

BATCH = 64


def _steps(intervals_s, epoch=1, t0=1000.0):
    """One worker's step lines of one epoch, each step starting when the one before ended."""
    lines, t = [], t0
    for step, interval in enumerate(intervals_s):
        lines.append({"epoch": epoch, "step": step, "t": t, "data_s": 0.0001,
                      "compute_s": interval - 0.0002, "exchange_s": 0.0, "step_s": interval})
        t += interval
    return lines


def _write_cell(tmp_path, steps_by_rank, epochs_s, first_step_s=0.05, steps_per_epoch=None,
                partition="shard"):
    events = tmp_path / "events"
    events.mkdir()
    workers = max(len(steps_by_rank), 1)
    for rank in range(workers):
        lines = steps_by_rank.get(rank) or []
        if lines:
            steps_path(events, "worker", rank).write_text(
                "".join(json.dumps(line) + "\n" for line in lines))
        spe = steps_per_epoch or len([x for x in lines if x["epoch"] == 1])
        out = [{"event": "start", "t": 0.0, "rank": rank, "num_workers": workers,
                "batch": BATCH, "steps_per_epoch": spe, "train_samples": spe * BATCH * workers,
                "data_partition": partition}]
        for i, epoch_s in enumerate(epochs_s, start=1):
            first = {"first_step_s": first_step_s} if i == 1 else {}
            out.append({"event": "epoch", "t": float(i), "rank": rank, "epoch": i,
                        "epoch_s": epoch_s, **first})
        out.append({"event": "end", "t": 9.0, "rank": rank, "samples_per_s": 1.0, "syncs": 1})
        (events / f"worker-{rank}.jsonl").write_text(
            "".join(json.dumps(e) + "\n" for e in out))
    return read_cell_events(events)


def _record(tmp_path, events, devices=1, sync="sync"):
    cell = CellConfig(engine="torch", model="lenet-mlp", layers=None, batch=BATCH,
                      devices=devices, sync=sync, epochs=2)
    return breakdown_columns(cell, tmp_path, events, specs=[])


def test_one_slow_step_moves_the_rate_by_at_most_a_few_percent(tmp_path):
    # The fast one-device LeNet-MLP cell: 188 steps of 0.87 ms an epoch, two epochs; the
    # host stalls one step of the first epoch for 78 ms (0.242 s against 0.164 s).
    clean = [0.00087] * 188
    slow = list(clean)
    slow[90] += 0.078
    lines = _steps(slow, 1) + _steps(clean, 2, t0=2000.0)
    events = _write_cell(tmp_path, {0: lines}, [sum(slow), sum(clean)], first_step_s=0.00087)
    record = _record(tmp_path, events)
    truth = 0.00087 / BATCH
    assert record["robust_from"] == "steps"
    assert record["robust_s_per_sample"] == pytest.approx(truth, rel=0.03)
    assert record["robust_slow_blocks"] >= 1
    # The first epoch's figure took the whole stall: 48% slower.
    steady = events.columns(t_launch=0.0)["steady_s_per_sample"]
    assert steady > 1.4 * truth


def test_nothing_left_out_is_the_mean_over_every_step_after_the_first(tmp_path):
    intervals = [0.001 * (1 + (i % 7) / 10) for i in range(300)]
    events = _write_cell(tmp_path, {0: _steps(intervals)}, [sum(intervals)])
    record = _record(tmp_path, events)
    assert record["robust_slow_blocks"] == 0
    # The last step of the epoch ends at its step_s; every other one at the next start.
    assert record["robust_s_per_sample"] == pytest.approx(
        sum(intervals[1:]) / (299 * BATCH), rel=1e-5)


def test_without_step_records_the_rate_falls_back_on_the_epochs(tmp_path):
    # --no-breakdown: no steps file. Epoch 1 counts without its first step.
    events = _write_cell(tmp_path, {}, [0.5 + 0.1, 0.5, 0.5], first_step_s=0.1 + 0.5 / 100,
                         steps_per_epoch=100)
    record = _record(tmp_path, events)
    assert record["robust_from"] == "epochs"
    assert record["robust_s_per_sample"] == pytest.approx(0.5 / 100 / BATCH, rel=1e-5)
    assert record["breakdown"] is None  # nothing timed: the breakdown stays empty


def test_a_slow_epoch_is_left_out_from_three_and_counted_from_two(tmp_path):
    blocks3 = [(0.5, 100), (0.9, 100), (0.5, 100)]
    assert typical_s_per_step(blocks3) == (pytest.approx(0.005), 1)
    # Two epochs: nothing tells which one was disturbed, both count.
    assert typical_s_per_step(blocks3[:2]) == (pytest.approx(0.007), 0)


def test_sampled_steps_are_not_the_rate(tmp_path):
    # MXNet and Horovod time one step in 100, alone (drained): the epochs give the rate.
    _write_cell(tmp_path, {}, [1.1, 1.0], first_step_s=0.11, steps_per_epoch=100)
    lines = [{"epoch": 1, "step": 50, "t": 1000.0, "data_s": 0.0, "compute_s": 0.02,
              "exchange_s": 0.0, "step_s": 0.02, "drain_s": 0.0, "every": 100}]
    steps_path(tmp_path / "events", "worker", 0).write_text(json.dumps(lines[0]) + "\n")
    record = _record(tmp_path, read_cell_events(tmp_path / "events"))
    assert record["breakdown"] == "1 in 100 steps"
    assert record["robust_from"] == "epochs"
    assert record["robust_s_per_sample"] == pytest.approx(
        (0.99 + 1.0) / 199 / BATCH, rel=1e-5)


def test_cpu_throttled_steps_give_their_mean_not_a_median():
    # A CFS quota of 1 ms of CPU every 6.7 ms (0.15 cores), 0.3 ms steps: three steps
    # run in each slice, the fourth waits out the 5.7 ms freeze. A median over single
    # steps would say 0.3 ms (5.8 x too fast); blocks of 50 ms hold the freezes.
    intervals = [0.0003, 0.0003, 0.0003, 0.0003 + 0.0057] * 400
    lines = _steps(intervals, epoch=2)
    columns = robust_columns({0: lines}, {}, {"batch": BATCH, "steps_per_epoch": 1600},
                             every_step_timed=True)
    truth = sum(intervals) / len(intervals) / BATCH
    assert columns["robust_s_per_sample"] == pytest.approx(truth, rel=0.02)
    assert columns["robust_slow_blocks"] == 0


def test_two_sharded_workers_add_up_and_a_replicated_cell_counts_the_set_once(tmp_path):
    steps = {0: _steps([0.002] * 100), 1: _steps([0.002] * 100)}
    shard = robust_columns(steps, {}, {"batch": BATCH, "steps_per_epoch": 100,
                                       "num_workers": 2, "data_partition": "shard"}, True)
    replicate = robust_columns(steps, {}, {"batch": BATCH, "steps_per_epoch": 100,
                                           "num_workers": 2, "data_partition": "replicate"},
                               True)
    # Sharded: a step of both workers passes 2 x 64 samples of the set; replicated, 64.
    assert shard["robust_s_per_sample"] == pytest.approx(0.002 / (2 * BATCH), rel=1e-5)
    assert replicate["robust_s_per_sample"] == pytest.approx(0.002 / BATCH, rel=1e-5)


def test_blocks_are_long_enough_for_a_cpu_quota():
    # Blocks hold at least BLOCK_S; one freeze more at 0.0415 cores (24 ms periods) then
    # moves a block by less than the factor that marks it slow.
    assert 1 + 0.024 / BLOCK_S < SLOW_FACTOR


def test_a_short_epoch_is_cut_into_eighths():
    # A fast host's 0.07 s epoch: seven or eight blocks of whole steps, not one (which
    # nothing could judge).
    assert BLOCKS_PER_EPOCH - 1 <= len(step_blocks(_steps([0.0007] * 101))) <= BLOCKS_PER_EPOCH
    # A 1 s epoch: blocks of BLOCK_S.
    assert 19 <= len(step_blocks(_steps([0.001] * 1001))) <= 1 / BLOCK_S


def test_the_report_reads_the_robust_rate_first_in_the_boards_time():
    assert board_time.is_time("robust_s_per_sample")
    r = {"robust_s_per_sample": 1e-4, "steady_s_per_sample": 2e-4, "speedup": 4.0}
    assert _per_sample_s(r) == pytest.approx(4e-4)
    assert _per_sample_s({"steady_s_per_sample": 2e-4}) == pytest.approx(2e-4)
