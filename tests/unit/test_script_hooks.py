"""The script launcher's bookkeeping (``workloads.script_hooks.StepRecorder``) on a fake
clock, PyTorch's global hooks feeding it in this process, and ``edgeprof_hooks``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import edgeprof_hooks
from workloads.events import read_events, EventWriter
from workloads.script_hooks import Hooks, StepRecorder, batch_size, plain
from workloads.steps import StepLog, read_steps


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def at(self, t: float) -> "Clock":
        self.now = t
        return self


@pytest.fixture
def run(tmp_path):
    clock = Clock()
    events = EventWriter(tmp_path, 0)
    recorder = StepRecorder(events, StepLog(tmp_path, "worker", 0), world_size=2,
                            clock=clock)
    yield recorder, clock, tmp_path
    events.close()


def _steps(tmp_path):
    return read_steps(tmp_path / "steps-worker-0.jsonl")


def _events(tmp_path):
    return read_events(tmp_path / "worker-0.jsonl")


def test_a_ddp_step_splits_into_data_compute_exchange(run):
    recorder, clock, tmp_path = run
    # Step 0: forward at 100, last bucket at 100.030, backward ends 100.042, optimizer
    # 100.045 - 100.047.
    recorder.training_forward(32)
    clock.at(100.030)
    assert recorder.bucket_launched()
    clock.at(100.042)
    recorder.backward_ended()
    clock.at(100.045)
    recorder.optimizer_starting()
    clock.at(100.047)
    recorder.optimizer_stepped()
    # Step 1: the batch is ready 5 ms later; two buckets, the last at 100.080.
    clock.at(100.052)
    recorder.training_forward(32)
    clock.at(100.070)
    assert recorder.bucket_launched()
    clock.at(100.080)
    assert not recorder.bucket_launched()
    clock.at(100.081)
    recorder.backward_ended()
    clock.at(100.085)
    recorder.optimizer_stepped()
    end = recorder.finish()
    first, second = _steps(tmp_path)
    assert (first["epoch"], first["step"], second["step"]) == (1, 0, 1)
    assert first["data_s"] == 0.0  # nothing before the first step to measure from
    assert first["exchange_s"] == pytest.approx(0.012)
    assert first["optimizer_s"] == pytest.approx(0.002)
    assert first["step_s"] == pytest.approx(0.047)
    assert first["compute_s"] == pytest.approx(0.035)
    assert second["data_s"] == pytest.approx(0.005)
    assert second["exchange_s"] == pytest.approx(0.001)  # after the last bucket only
    assert second["step_s"] == pytest.approx(0.038)
    assert second["compute_s"] == pytest.approx(0.032)
    kinds = [e["event"] for e in _events(tmp_path)]
    assert kinds == ["start", "first_step", "end"]
    assert (end["steps"], end["samples"], end["syncs"]) == (2, 64, 2)
    assert end["accuracy_reported"] is False
    assert end["samples_per_s"] == pytest.approx(64 / 0.085)


def test_validation_and_log_are_no_steps_time(run):
    recorder, clock, tmp_path = run
    for t in (0.0, 0.010):  # two steps of 10 ms, the second starting at once
        clock.at(100.0 + t)
        recorder.training_forward(8)
        clock.at(100.0 + t + 0.010)
        recorder.optimizer_stepped()
    clock.at(100.050)  # validation 20 -> 50 ms, then log at 60 ms
    recorder.evaluated()
    clock.at(100.060)
    recorder.log({"epoch": 1, "val_accuracy": 0.5, "train_loss": 1.25, "lr": 0.1})
    clock.at(100.065)  # epoch 2's first step: 5 ms of data after the log
    recorder.training_forward(8)
    clock.at(100.075)
    recorder.optimizer_stepped()
    clock.at(100.090)
    recorder.log({"val_accuracy": 0.75})  # epoch number left out: counted on
    recorder.finish()
    lines = _steps(tmp_path)
    assert [(line["epoch"], line["step"]) for line in lines] == [(1, 0), (1, 1), (2, 0)]
    assert lines[2]["data_s"] == pytest.approx(0.005)
    assert lines[2]["step_s"] == pytest.approx(0.015)
    epochs = [e for e in _events(tmp_path) if e["event"] == "epoch"]
    assert [e["epoch"] for e in epochs] == [1, 2]
    # To the end of the epoch's last step, not to the log call after validation.
    assert epochs[0]["epoch_s"] == pytest.approx(0.020)
    assert epochs[0]["first_step_s"] == pytest.approx(0.010)
    assert epochs[1]["epoch_s"] == pytest.approx(0.015)
    assert (epochs[0]["steps"], epochs[0]["samples"], epochs[0]["lr"]) == (2, 16, 0.1)
    assert "train_loss" not in epochs[1] and epochs[1]["val_accuracy"] == 0.75
    end = _events(tmp_path)[-1]
    assert end["accuracy_reported"] is True and end["train_s"] == pytest.approx(0.035)
    assert end["steps_per_epoch"] == 2


def test_optimizers_without_a_forward_between_make_one_step(run):
    recorder, clock, tmp_path = run
    recorder.training_forward(4)
    for t in (100.010, 100.012):  # a GAN's two optimizers
        clock.at(t)
        recorder.optimizer_stepped()
    clock.at(100.020)
    recorder.training_forward(4)
    clock.at(100.030)
    recorder.optimizer_stepped()
    recorder.finish()
    lines = _steps(tmp_path)
    assert len(lines) == 2 and lines[0]["step_s"] == pytest.approx(0.012)


def test_an_error_keeps_the_steps_and_names_the_status(run):
    recorder, clock, tmp_path = run
    recorder.training_forward(4)
    clock.at(100.010)
    recorder.optimizer_stepped()
    recorder.error("error", "ValueError: boom", 1)
    assert len(_steps(tmp_path)) == 1
    error = _events(tmp_path)[-1]
    assert (error["event"], error["message"], error["exit_status"], error["steps"]) == (
        "error", "ValueError: boom", 1, 1)


def test_logged_values_become_plain_json():
    import torch

    assert plain(torch.tensor(0.5)) == 0.5
    assert plain(float("nan")) == "nan"
    assert plain([1, 2]) == "[1, 2]"
    assert batch_size((None, torch.zeros(7, 3))) == 7
    assert batch_size((3,)) is None


def test_torch_hooks_see_steps_validation_and_the_batch(tmp_path):
    """PyTorch's own global hooks on a real model: a loss module and validation under
    no_grad are no steps; the forward's batch is counted."""
    import torch

    events = EventWriter(tmp_path, 0)
    recorder = StepRecorder(events, StepLog(tmp_path, "worker", 0))
    hooks = Hooks(recorder)
    try:
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(),
                                    torch.nn.Linear(8, 2))
        criterion = torch.nn.CrossEntropyLoss()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            opt.zero_grad()
            criterion(model(torch.randn(5, 4)), torch.zeros(5, dtype=torch.long)).backward()
            opt.step()
        with torch.no_grad():
            model(torch.randn(9, 4))
        edgeprof_hooks._set_receiver(recorder.log)
        edgeprof_hooks.log(epoch=1, val_accuracy=0.5)
        end = recorder.finish()
    finally:
        hooks.remove()
        edgeprof_hooks._set_receiver(None)
        events.close()
    assert len(_steps(tmp_path)) == 3 and hooks.depth == 0
    start = _events(tmp_path)[0]
    assert (start["batch"], start["param_count"], start["comm"]) == (5, 4 * 8 + 8 + 8 * 2 + 2,
                                                                    "local")
    assert (end["samples"], end["accuracy_reported"]) == (15, True)


def test_edgeprof_hooks_needs_only_the_standard_library():
    code = ("import sys; before = set(sys.modules); import edgeprof_hooks; "
            "edgeprof_hooks.log(epoch=1, val_accuracy=0.9); "
            "print(sorted(set(sys.modules) - before))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    loaded = json.loads(done.stdout.replace("'", '"'))
    assert "edgeprof_hooks" in loaded
    assert [m for m in loaded if m != "edgeprof_hooks"
            and m.split(".")[0] not in sys.stdlib_module_names] == []


def test_a_loop_without_torch_optim_has_no_steps(tmp_path):
    """What the hooks cannot see: a hand-written update makes no step (docs say what the
    row shows then); the run still starts and ends."""
    import torch

    events = EventWriter(tmp_path, 0)
    recorder = StepRecorder(events, StepLog(tmp_path, "worker", 0))
    hooks = Hooks(recorder)
    try:
        model = torch.nn.Linear(4, 2)
        for _ in range(3):
            model(torch.randn(5, 4)).sum().backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.1 * p.grad
                    p.grad = None
        end = recorder.finish()
    finally:
        hooks.remove()
        events.close()
    assert _steps(tmp_path) == []
    assert [e["event"] for e in _events(tmp_path)] == ["start", "end"]
    assert (end["steps"], end["samples"], end["samples_per_s"]) == (0, None, 0.0)


def test_a_script_that_never_logs_still_gets_its_steady_step(tmp_path):
    """No ``edgeprof_hooks.log`` call: every step was timed, and the row's steady step
    time and the breakdown's check against it come from the run's ``end``."""
    from types import SimpleNamespace

    from profiler.sweep.events import read_cell_events
    from profiler.timeline.record import breakdown_columns

    clock = Clock()
    events_dir = tmp_path / "events"
    events = EventWriter(events_dir, 0)
    recorder = StepRecorder(events, StepLog(events_dir, "worker", 0), world_size=1,
                            script="train.py", clock=clock)
    # A first step of 50 ms (one-off costs), then three of 10 ms; a 20 ms validation
    # after the second, which no step holds but the run's window does.
    t = 100.0
    for step_s in (0.050, 0.010, 0.010, 0.010):
        clock.at(t)
        recorder.training_forward(8)
        clock.at(t + step_s)
        recorder.optimizer_stepped()
        t += step_s
        if step_s == 0.010 and t < 100.065:
            clock.at(t + 0.020)
            recorder.evaluated()
            t += 0.020
    end = recorder.finish()
    events.close()
    assert end["epochs_logged"] == 0
    assert end["first_step_s"] == pytest.approx(0.050)
    assert end["train_s"] == pytest.approx(0.100)
    columns = breakdown_columns(SimpleNamespace(sync="sync", label="script"), tmp_path,
                                read_cell_events(events_dir), specs=[])
    assert columns["breakdown_steps"] == 3 and columns["step_ms_mean"] == pytest.approx(10)
    # (100 - 50) ms over 3 steps, the validation in it: the breakdown covers 30 of 50 ms.
    assert columns["steady_step_ms"] == pytest.approx(50 / 3, abs=1e-3)
    assert columns["breakdown_vs_step"] == pytest.approx(0.6, abs=1e-3)
