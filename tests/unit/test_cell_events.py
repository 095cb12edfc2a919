"""Workers' events turned into result columns and progress."""

from profiler.sweep.events import epochs_done, read_cell_events
from workloads.events import EventWriter


def _worker(events_dir, rank, t0, accuracies):
    writer = EventWriter(events_dir, rank)
    writer.emit("start", num_workers=2, train_samples=640)
    writer.emit("first_step")
    for epoch, acc in enumerate(accuracies, 1):
        writer.emit("epoch", epoch=epoch, epoch_s=1.5, val_accuracy=acc)
    writer.emit("end", samples=320, samples_per_s=100.0, syncs=10)
    writer.close()


def test_columns_take_rank0_accuracy_and_sum_throughput(tmp_path):
    _worker(tmp_path, 0, 0, [0.5, 0.75])
    _worker(tmp_path, 1, 0, [None, None])
    events = read_cell_events(tmp_path)
    assert events.complete()
    cols = events.columns(t_launch=events.train_window()[0] - 2.0)
    assert cols["val_accuracy"] == 0.75 and cols["val_accuracy_per_epoch"] == [0.5, 0.75]
    assert cols["samples_per_s"] == 200.0 and cols["syncs_per_worker"] == 10
    assert cols["epoch_s"] == [1.5, 1.5] and cols["elapsed_s"] >= 2.0
    assert cols["train_samples"] == 640


def test_missing_end_is_incomplete_and_torn_line_ignored(tmp_path):
    writer = EventWriter(tmp_path, 0)
    writer.emit("start", num_workers=1)
    writer.close()
    with open(tmp_path / "worker-0.jsonl", "a") as fh:
        fh.write('{"event": "epo')
    events = read_cell_events(tmp_path)
    assert not events.complete() and events.train_window() is None


def test_epochs_done_counts_rank0_epoch_events(tmp_path):
    assert epochs_done(tmp_path) == 0
    writer = EventWriter(tmp_path, 0)
    writer.emit("epoch", epoch=1, epoch_s=1.0)
    writer.emit("epoch", epoch=2, epoch_s=1.0)
    assert epochs_done(tmp_path) == 2


def test_a_script_says_its_steps_per_epoch_at_its_end(tmp_path):
    """The script launcher's start event comes before any epoch: the steady rate takes
    rank 0's steps_per_epoch from its end event."""
    with EventWriter(tmp_path, 0) as ev:
        ev.emit("start", num_workers=1, batch=10, script="train.py")
        ev.emit("first_step")
        ev.emit("epoch", epoch=1, epoch_s=2.0, first_step_s=0.2, train_loss=1.0)
        ev.emit("end", elapsed_s=2.1, train_s=2.0, samples=None, samples_per_s=0.0,
                syncs=10, steps_per_epoch=10)
    events = read_cell_events(tmp_path)
    assert events.start0()["steps_per_epoch"] == 10
    # (2.0 - 0.2) s over 9 steps of 10 samples.
    assert events.columns(0.0)["steady_s_per_sample"] == 0.02


def test_a_pipelines_stages_share_one_shard(tmp_path):
    """torch-pipe: 4 stages (workers) of one pipeline train one shard, which their start
    says (data_shards); the steady rate is that pipeline's, not 4 workers' worth."""
    for rank in range(4):
        with EventWriter(tmp_path, rank) as ev:
            ev.emit("start", num_workers=4, batch=10, steps_per_epoch=10, data_shards=1)
            ev.emit("first_step")
            ev.emit("epoch", epoch=1, epoch_s=2.0, first_step_s=0.2, train_loss=1.0)
            ev.emit("end", elapsed_s=2.1, train_s=2.0, samples=100 if rank == 0 else 0,
                    samples_per_s=50.0 if rank == 0 else 0.0, syncs=10)
    # (2.0 - 0.2) s over 9 steps of 10 samples, once.
    assert read_cell_events(tmp_path).columns(0.0)["steady_s_per_sample"] == 0.02


def test_a_pipelines_parameters_are_its_stages_summed(tmp_path):
    """Each stage holds only its own layers: the cell's parameters are one pipeline's
    stages' counts summed (two replicas of two stages here), not stage 0's alone."""
    counts = {0: 1000, 1: 234}
    for rank in range(4):
        stage, replica = rank % 2, rank // 2
        with EventWriter(tmp_path, rank) as ev:
            ev.emit("start", num_workers=4, batch=10, stage=stage, stages=2,
                    replica=replica, replicas=2, param_count=counts[stage])
    assert read_cell_events(tmp_path).parameters() == 1234


def test_a_pipeline_stage_that_did_not_start_gives_no_count(tmp_path):
    with EventWriter(tmp_path, 0) as ev:
        ev.emit("start", num_workers=2, stage=0, stages=2, replica=0, param_count=1000)
    assert read_cell_events(tmp_path).parameters() is None
    with EventWriter(tmp_path / "plain", 0) as ev:
        ev.emit("start", num_workers=1, param_count=1000)
    assert read_cell_events(tmp_path / "plain").parameters() == 1000
