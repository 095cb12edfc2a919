"""The step breakdown's split of each exchange into communicating and waiting, and its
summary columns (profiler.timeline.steps), from step files written as workers write them."""

from __future__ import annotations

import json

import pytest

from profiler.timeline.steps import load_cell_steps, percentile, summarize
from workloads.steps import StepLog, read_steps, sampled, steps_path


def _write(events_dir, role, rank, lines):
    path = steps_path(events_dir, role, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def _step(epoch, step, t, compute, exchange, data=0.001):
    return {"epoch": epoch, "step": step, "t": t, "data_s": data, "compute_s": compute,
            "exchange_s": exchange, "step_s": data + compute + exchange}


def test_sync_wait_is_the_time_behind_the_last_worker_plus_the_server_update(tmp_path):
    # Step 1: worker 0 reaches the exchange at t=0.011, worker 1 (slow) at 0.031; the
    # server's update of round 1 took 2 ms.
    _write(tmp_path, "worker", 0, [_step(1, 0, 0.0, 0.01, 0.05), _step(1, 1, 0.0, 0.01, 0.040)])
    _write(tmp_path, "worker", 1, [_step(1, 0, 0.0, 0.01, 0.05), _step(1, 1, 0.0, 0.03, 0.020)])
    _write(tmp_path, "server", 0, [{"round": 0, "t": 0, "recv_s": 0.01, "update_s": 0.001,
                                    "send_s": 0.001},
                                   {"round": 1, "t": 0, "recv_s": 0.03, "update_s": 0.002,
                                    "send_s": 0.001}])
    steps = load_cell_steps(tmp_path, sync=True, worker_nodes={0: "n1", 1: "n2"},
                            server_nodes={0: "n0"})
    fast, slow = steps.workers[0][1], steps.workers[1][1]
    assert fast["wait_s"] == pytest.approx(0.020 + 0.002)
    assert fast["comm_s"] == pytest.approx(0.040 - 0.022)
    assert slow["wait_s"] == pytest.approx(0.002)
    assert slow["comm_s"] + slow["wait_s"] == pytest.approx(slow["exchange_s"])


def test_async_cells_wait_for_no_worker(tmp_path):
    _write(tmp_path, "worker", 0, [_step(1, 1, 0.0, 0.01, 0.03)])
    _write(tmp_path, "worker", 1, [_step(1, 1, 0.0, 0.05, 0.03)])
    steps = load_cell_steps(tmp_path, sync=False, worker_nodes={}, server_nodes={})
    assert [lines[0]["wait_s"] for lines in steps.workers.values()] == [0.0, 0.0]
    assert steps.workers[0][0]["comm_s"] == pytest.approx(0.03)


def test_clock_offsets_align_the_nodes(tmp_path):
    # Worker 1's clock runs 10 s ahead: without the offset it would look 10 s late.
    _write(tmp_path, "worker", 0, [_step(1, 1, 100.0, 0.02, 0.01)])
    _write(tmp_path, "worker", 1, [_step(1, 1, 110.0, 0.01, 0.02)])
    steps = load_cell_steps(tmp_path, sync=True, worker_nodes={0: "a", 1: "b"},
                            server_nodes={}, offsets_s={"b": 10.0})
    assert steps.workers[1][0]["t"] == pytest.approx(100.0)
    assert steps.workers[1][0]["wait_s"] == pytest.approx(0.01)
    assert steps.workers[0][0]["wait_s"] == 0.0


def test_summary_columns_slowest_worker_and_the_check_against_epoch_times(tmp_path):
    lines0 = [_step(1, s, s * 0.1, 0.010, 0.030) for s in range(5)]
    lines1 = [_step(1, s, s * 0.1, 0.030, 0.010) for s in range(5)]
    _write(tmp_path, "worker", 0, lines0)
    _write(tmp_path, "worker", 1, lines1)
    steps = load_cell_steps(tmp_path, sync=True, worker_nodes={0: "n1", 1: "n2"},
                            server_nodes={})
    # 5 steps of 41 ms each, the first of them 100 ms (one-off costs).
    epochs = {r: [{"epoch": 1, "epoch_s": 0.1 + 4 * 0.041, "first_step_s": 0.1}]
              for r in (0, 1)}
    cols = summarize(steps, epochs, steps_per_epoch=5, sync=True)
    assert cols["breakdown"] == "every step"
    assert cols["breakdown_steps"] == 8  # the run's first step is left out
    assert cols["slowest_worker"] == "n2" and cols["slowest_rank"] == 1
    assert cols["wait_ms_by_worker"] == {"0": pytest.approx(20.0), "1": 0.0}
    assert cols["compute_ms_mean"] == pytest.approx(20.0)
    assert cols["wait_ms_mean"] == pytest.approx(10.0)
    assert cols["comm_ms_mean"] == pytest.approx(10.0)
    assert cols["steady_step_ms"] == pytest.approx(41.0)
    assert cols["breakdown_vs_step"] == pytest.approx(1.0, abs=0.001)
    assert cols["server_update_ms_mean"] is None


def test_nothing_timed_gives_empty_columns(tmp_path):
    cols = summarize(load_cell_steps(tmp_path, sync=True, worker_nodes={}, server_nodes={}),
                     {}, steps_per_epoch=3, sync=True)
    assert cols["breakdown"] is None and cols["slowest_worker"] is None


def test_step_log_buffers_and_writes_wall_clock_stamps(tmp_path):
    log = StepLog(tmp_path, "worker", 3)
    log.add(epoch=1, step=0, t=log.wall(0.0), data_s=0.5)
    assert not steps_path(tmp_path, "worker", 3).exists()  # nothing written yet
    log.flush()
    (line,) = read_steps(steps_path(tmp_path, "worker", 3))
    assert line["data_s"] == 0.5
    off = StepLog(tmp_path, "worker", 4, enabled=False)
    off.add(epoch=1)
    off.flush()
    assert not steps_path(tmp_path, "worker", 4).exists()


def test_sampling_times_one_step_in_100_and_one_mid_epoch_in_short_epochs():
    assert [s for s in range(20) if sampled(s, 20)] == [10]
    assert [s for s in range(250) if sampled(s, 250)] == [50, 150]
    assert sum(sampled(s, 2000) for s in range(2000)) == 20
    assert [s for s in range(1) if sampled(s, 1)] == [0]  # (the run's first: not counted)


def test_a_sampled_cell_says_one_step_in_how_many(tmp_path):
    line = {**_step(1, 1, 0.0, 0.01, 0.01), "drain_s": 0.002, "every": 20}
    _write(tmp_path, "worker", 0, [line])
    steps = load_cell_steps(tmp_path, sync=True, worker_nodes={}, server_nodes={})
    cols = summarize(steps, {}, steps_per_epoch=400, sync=True)
    assert steps.sampled and cols["breakdown"] == "1 in 20 steps"


def test_percentile_interpolates_like_numpy():
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)
    assert percentile([0.0, 10.0], 95) == pytest.approx(9.5)
