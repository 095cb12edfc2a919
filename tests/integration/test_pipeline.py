"""Pipeline parallelism for real: ``torch-pipe`` cells through the cell runner, every stage
a real ``workloads.train`` process speaking Gloo over loopback through
``torch.distributed.pipelining``, and its bad inputs through the CLI."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from profiler.cluster.local import LocalCluster
from profiler.engines import get_engine
from profiler.engines.base import TrainOptions
from profiler.sweep.grid import CellConfig, validate
from profiler.sweep.runner import run_cell
from profiler.timeline.trace import MICRO_TID, check_trace
from tests.conftest import ROOT, assert_one_line, need, no_children_left

pytestmark = pytest.mark.integration
TINY = TrainOptions(val_samples=128)
EDGEPROF = [sys.executable, "-m", "profiler.cli"]


@pytest.fixture(autouse=True)
def _torch():
    need("torch (scripts/setup.sh installs its CPU build)",
         importlib.util.find_spec("torch") is not None)


def _cell(**kw) -> CellConfig:
    return validate(CellConfig.from_fields({
        "engine": "torch-pipe", "model": "lenet-cnn", "layers": None, "devices": 2,
        "batch": 32, "max_samples": 320, "dataset": "fashion-mnist", "epochs": 2,
        "microbatches": 4, "schedule": "gpipe", "replicas": 1, "split": "balanced", **kw}))


def _run(tmp_path, cell, timeout_s=240):
    engine = get_engine(cell.engine)
    cluster = LocalCluster(engine.nodes_needed(cell))
    return run_cell(cell, cluster, engine, tmp_path / cell.cell_id, TINY, sweep_id="t",
                    timeout_s=timeout_s, monitor_interval_s=None)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_a_pipeline_trains_as_one_device_does(tmp_path, schedule):
    """LeNet-5 (no BatchNorm) split into 2 stages, 4 micro-batches: the same initial
    weights, batches and global batch as one device, so the same losses epoch by epoch
    (the schedule averages the micro-batches' gradients: the batch's mean). Tolerance
    1e-4 relative: only the order of float sums differs."""
    alone = _run(tmp_path, validate(CellConfig(
        engine="torch", model="lenet-cnn", layers=None, devices=1, batch=32,
        max_samples=320, dataset="fashion-mnist", epochs=2)))
    piped = _run(tmp_path, _cell(schedule=schedule))
    assert alone["status"] == piped["status"] == "ok", (alone["reason"], piped["reason"])
    assert piped["train_loss_per_epoch"] == pytest.approx(alone["train_loss_per_epoch"],
                                                          rel=1e-4)
    assert piped["val_accuracy"] == pytest.approx(alone["val_accuracy"], abs=1 / 128)
    # Every stage's samples are the pipeline's: counted once.
    assert piped["samples_per_s"] > 0 and piped["syncs_per_worker"] == 20
    assert piped["pipe_split"] and sum(map(int, piped["pipe_split"].split(","))) == 12
    assert len(piped["stage_compute_ms"]) == 2 and all(t > 0 for t in piped["stage_compute_ms"])
    assert piped["bubble_gpipe"] == pytest.approx(1 / 5)
    assert 0 <= piped["bubble_measured"] < 1
    assert piped["pipe_step_ms"] > 0 and piped["pipe_step_ms_predicted"] > 0
    assert piped["pipe_bytes_floor_per_step"] > 0
    # The trace: each stage's micro-batches, F0..F3 then B0..B3 under GPipe, interleaved
    # under 1F1B, on a track of their own, in a document the viewers accept.
    doc = json.loads((tmp_path / piped["cell_id"] / "trace.json").read_text())
    assert check_trace(doc) == []
    micro = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e["tid"] >= MICRO_TID]
    stage0 = [e["name"] for e in sorted(micro, key=lambda e: e["ts"])
              if e["tid"] == MICRO_TID][:8]
    assert sorted(stage0) == ["B0", "B1", "B2", "B3", "F0", "F1", "F2", "F3"]
    if schedule == "gpipe":
        assert stage0 == ["F0", "F1", "F2", "F3", "B0", "B1", "B2", "B3"]
    else:
        assert stage0 != ["F0", "F1", "F2", "F3", "B0", "B1", "B2", "B3"]
    no_children_left()


def test_pipelines_side_by_side_average_their_stages(tmp_path):
    """ResNet-8 (residual blocks whole inside their stage) as 2 pipelines of 2 stages,
    1F1B: each stage's replicas average their gradients, so both pipelines hold the same
    weights; only the first stages count samples."""
    record = _run(tmp_path, _cell(model="resnet", layers=8, devices=4, replicas=2,
                                  schedule="1f1b", microbatches=2, dataset="synthetic",
                                  epochs=1))
    assert record["status"] == "ok", record["reason"]
    assert record["pipe_stages"] == 2 and len(record["stage_compute_ms"]) == 2
    starts = {}
    for rank in range(4):
        path = tmp_path / record["cell_id"] / "events" / f"worker-{rank}.jsonl"
        starts[rank] = next(json.loads(line) for line in path.read_text().splitlines()
                            if '"start"' in line)
    assert [(s["stage"], s["replica"]) for s in starts.values()] == [(0, 0), (1, 0),
                                                                     (0, 1), (1, 1)]
    assert [s["counts_samples"] for s in starts.values()] == [True, False, True, False]
    assert starts[0]["split"] == starts[2]["split"]  # the same cut for both pipelines
    no_children_left()


def test_gpipe_stashes_every_micro_batch_and_1f1b_only_a_few(tmp_path):
    """The same split, 8 micro-batches on 2 stages: stage 0 under GPipe holds all 8
    micro-batches' activations before the first backward, under 1F1B at most 2 (S), so
    its stash is several times smaller (4x in theory; at least 2x asked)."""
    stash = {}
    for schedule in ("gpipe", "1f1b"):
        record = _run(tmp_path, _cell(model="resnet", layers=8, schedule=schedule,
                                      microbatches=8, split="5,4", dataset="synthetic",
                                      epochs=1))
        assert record["status"] == "ok", record["reason"]
        assert record["pipe_split"] == "5,4"
        stash[schedule] = record["stage_stash_mb"]
    assert stash["gpipe"][0] > 2 * stash["1f1b"][0] > 0, stash


def test_inference_streams_the_test_set_through_the_stages(tmp_path):
    """--task infer: one device, a 2-stage pipeline and 2 whole-model replicas see the
    same weights (the same seed), so they classify the stream alike; each streamed
    sample is counted once; the pipeline's latency is a batch's way through both
    stages."""
    records = [_run(tmp_path, _cell(task="infer", devices=devices, replicas=replicas,
                                    epochs=1, max_samples=64, split="balanced"))
               for devices, replicas in ((1, 1), (2, 1), (2, 2))]
    for record in records:
        assert record["status"] == "ok", record["reason"]
        assert record["samples_per_s"] > 0 and record["infer_latency_ms"] > 0
        assert record["train_loss_per_epoch"] == [None]
    alone, piped, replicas = records
    assert alone["val_accuracy"] == piped["val_accuracy"] == replicas["val_accuracy"]
    assert alone["syncs_per_worker"] == piped["syncs_per_worker"] == 4  # 128 / 32
    assert replicas["syncs_per_worker"] == 2  # each replica half of the stream
    assert piped["bubble_gpipe"] == pytest.approx(1 / 5) and alone["bubble_gpipe"] == 0
    # A batch's way through both stages takes at least their compute; alone, latency and
    # period are one step.
    assert piped["infer_latency_ms"] >= sum(piped["stage_compute_ms"]) * 0.9
    assert piped["infer_period_ms"] > 0
    assert alone["infer_latency_ms"] == pytest.approx(alone["infer_period_ms"], rel=0.05)


def test_inference_with_trained_weights_is_as_accurate_as_training_says(tmp_path):
    """--weights train: the cell trains its epochs, then streams the test set through the
    trained stages, so its accuracy is the one a --task train cell of the same settings
    validates at (the same seed, batches and schedule: the same weights), well above
    chance; --weights init streams untrained weights, at chance. Accuracy counts
    samples, not seconds: a loaded host and an idle one give the same."""
    shape = dict(max_samples=640, epochs=2)
    trained = _run(tmp_path, _cell(task="infer", weights="train", **shape))
    fresh = _run(tmp_path, _cell(task="infer", **shape))
    training = _run(tmp_path, _cell(**shape))
    for record in (trained, fresh, training):
        assert record["status"] == "ok", record["reason"]
    # 0.578 measured (2 epochs of 640 fashion-mnist samples, 128 test samples; init 0.102).
    assert trained["val_accuracy"] > 0.45
    assert trained["val_accuracy"] == pytest.approx(training["val_accuracy"], abs=1 / 128)
    assert fresh["val_accuracy"] < 0.25  # ten classes: 0.1 is chance
    assert trained["weights"] == "train" and fresh.get("weights") is None  # init: left out
    assert trained["infer_latency_ms"] > 0 and trained["train_loss_per_epoch"] == [None] * 2
    # The stream's steps alone are measured: 4 batches of 32 a pass, 2 passes.
    assert trained["syncs_per_worker"] == fresh["syncs_per_worker"] == 8
    start = next(json.loads(line) for line in (tmp_path / trained["cell_id"] / "events" /
                                               "worker-0.jsonl").read_text().splitlines()
                 if '"start"' in line)
    assert len(start["pretrain_loss"]) == 2 and start["startup_s"]["train"] > 0
    no_children_left()


def _trained_lenet(epochs: int = 3):
    """A LeNet-CNN trained here, alone, on the samples a cell of 640 trains on, and its
    accuracy on the cell's 128 test samples."""
    import torch

    from workloads import torch_models
    from workloads.datasets import loader

    data = loader.load("lenet-cnn", None, 640, 128, 7, raw=True, dataset="fashion-mnist")
    torch.manual_seed(7)
    net = torch_models.build("lenet-cnn", None, data.classes)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    x, y = torch.from_numpy(data.normalize(data.x_train)), torch.from_numpy(data.y_train)
    for _ in range(epochs):
        for start in range(0, len(x), 32):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(net(x[start:start + 32]),
                                              y[start:start + 32].long()).backward()
            optimizer.step()
    test = loader.load("lenet-cnn", None, 640, 128, 42, raw=True, dataset="fashion-mnist")
    with torch.no_grad():
        out = net.eval()(torch.from_numpy(test.normalize(test.x_test)))
    return net, float((out.argmax(dim=1).numpy() == test.y_test).mean())


def test_inference_from_a_checkpoint_gives_its_models_accuracy(tmp_path):
    """--weights PATH: a state_dict saved from a model built as the cell builds it is
    staged to the nodes and loaded before the cut: the pipeline classifies the test set
    as that model does here."""
    import torch

    net, accuracy = _trained_lenet()
    assert accuracy > 0.45  # trained: well above chance (0.719 measured)
    path = tmp_path / "lenet.pt"
    torch.save(net.state_dict(), path)
    done = subprocess.run([*EDGEPROF, "run", "--engine", "torch-pipe", "--model", "lenet-cnn",
                           "--devices", "2", "--batch", "32", "--microbatches", "4",
                           "--max-samples", "64", "--val-samples", "128", "--task", "infer",
                           "--weights", str(path), "--dataset", "fashion-mnist", "--no-agent",
                           "--out", str(tmp_path / "out")], cwd=ROOT, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads((tmp_path / "out" / "results.jsonl").read_text().splitlines()[-1])
    assert record["status"] == "ok", record["reason"]
    assert record["weights"].startswith("lenet.pt@")
    assert record["val_accuracy"] == pytest.approx(accuracy, abs=1 / 128)
    assert list((tmp_path / "out" / "inputs").glob("weights-*.pt"))  # staged by digest


def test_a_checkpoint_that_does_not_fit_is_one_line(tmp_path):
    """Checked on the controller before anything runs: another model's state_dict, and
    a file torch cannot read as weights."""
    import torch

    from workloads import torch_models

    other = tmp_path / "mlp.pt"
    torch.save(torch_models.build("lenet-mlp", None, 10).state_dict(), other)
    junk = tmp_path / "junk.pt"
    junk.write_text("not a checkpoint\n")
    for path, words in ((other, ["does not fit lenet-cnn", "save the state_dict"]),
                        (junk, ["torch.load cannot read it"])):
        done = subprocess.run([*EDGEPROF, "sweep", "--engine", "torch-pipe", "--model",
                               "lenet-cnn", "--devices", "2", "--task", "infer",
                               "--weights", str(path), "--out", str(tmp_path / "out")],
                              cwd=ROOT, capture_output=True, text=True)
        assert_one_line(done, f"--weights {path}", *words)
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args, words", [
    (["--devices", "2", "--microbatches", "64"], ["--microbatches 64 is more than the batch"]),
    (["--devices", "2", "--microbatches", "3"], ["does not divide into 3 micro-batches"]),
    (["--devices", "16"], ["more than lenet-cnn's 12 layers"]),
    (["--devices", "4", "--schedule", "1f1b", "--microbatches", "2"],
     ["1f1b needs at least one micro-batch per stage"]),
    (["--devices", "2", "--split", "3,4"], ["adds up to 7 layers"]),
    (["--devices", "3", "--replicas", "2"], ["not a multiple of --replicas 2"]),
    (["--devices", "2", "--schedule", "zb"], ["--schedule 'zb' is unknown"]),
    (["--devices", "1"], ["pipelines of 1 stage"]),
    (["--devices", "2", "--task", "infer", "--schedule", "1f1b", "--microbatches", "2"],
     ["--task infer streams forward only"]),
    (["--devices", "2", "--weights", "train"], ["--weights train trains the cell before"]),
    (["--devices", "2", "--task", "infer", "--weights", "nosuch.pt"],
     ["--weights 'nosuch.pt' is neither init nor train nor a file"]),
])
def test_bad_pipeline_settings_are_one_line(tmp_path, args, words):
    done = subprocess.run([*EDGEPROF, "sweep", "--engine", "torch-pipe", "--model", "lenet-cnn",
                           "--batch", "32", "--out", str(tmp_path / "out"), *args],
                          cwd=ROOT, capture_output=True, text=True)
    assert_one_line(done, *words)
    assert not (tmp_path / "out").exists()


def test_pipeline_settings_need_the_pipeline_engine(tmp_path):
    done = subprocess.run([*EDGEPROF, "sweep", "--engine", "torch-ddp", "--microbatches", "4",
                           "--out", str(tmp_path / "out")], cwd=ROOT, capture_output=True,
                          text=True)
    assert_one_line(done, "--microbatches is a setting of --engine torch-pipe")


def test_a_users_sequential_model_is_split_and_another_module_refused(tmp_path):
    """A user's factory (examples/cnn_model.py returns a Sequential) is cut like a built-in
    model; a module that is no Sequential is refused before anything runs."""
    done = subprocess.run([*EDGEPROF, "sweep", "--engine", "torch-pipe", "--model",
                           "examples/cnn_model.py:make_model", "--devices", "2", "--batch", "32",
                           "--microbatches", "4", "--max-samples", "320", "--val-samples", "64",
                           "--dataset", "fashion-mnist", "--no-agent",
                           "--out", str(tmp_path / "ok")], cwd=ROOT, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads((tmp_path / "ok" / "results.jsonl").read_text().splitlines()[-1])
    assert record["status"] == "ok", record["reason"]
    assert record["model"] == "cnn_model.py:make_model" and record["pipe_split"]
    factory = tmp_path / "net.py"
    factory.write_text("import torch\n\nclass Net(torch.nn.Module):\n"
                       "    def __init__(self):\n        super().__init__()\n"
                       "        self.a = torch.nn.Flatten()\n"
                       "        self.b = torch.nn.Linear(784, 10)\n\n"
                       "    def forward(self, x):\n        return self.b(self.a(x))\n\n"
                       "def make():\n    return Net()\n")
    done = subprocess.run([*EDGEPROF, "sweep", "--engine", "torch-pipe", "--model",
                           f"{factory}:make", "--devices", "2", "--dataset", "fashion-mnist",
                           "--out", str(tmp_path / "bad")], cwd=ROOT, capture_output=True,
                          text=True)
    assert_one_line(done, "not a torch.nn.Sequential")
    assert not (tmp_path / "bad").exists()
