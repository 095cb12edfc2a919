"""``python -m workloads.train`` as real processes: local KVStore, a hand-started
2-worker ``dist_sync`` cluster (scheduler + server + 2 workers on loopback), and the
exit statuses for bad data, bad config and out of memory."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest

from profiler.ports import free_port
from workloads.events import read_events

pytestmark = pytest.mark.integration
TINY = ["--max-samples", "320", "--val-samples", "200", "--batch", "16", "--dataset", "synthetic"]


def _train(events_dir, *args, env=None, timeout_s=180, preexec_fn=None):
    argv = [sys.executable, "-m", "workloads.train", "--events-dir", str(events_dir), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                          env={**os.environ, **(env or {})}, preexec_fn=preexec_fn)


@pytest.mark.parametrize("framework,model,epochs", [
    ("mxnet", "lenet-mlp", 2), ("mxnet", "lenet-cnn", 1), ("mxnet", "resnet --layers 8", 1),
    # torch's LeNets train in tests/integration/test_torch_engines.py and test_accuracy.py
    ("torch", "resnet --layers 8", 1), ("torch", "mobilenetv2", 1)])
def test_local_training_writes_events(tmp_path, framework, model, epochs):
    done = _train(tmp_path, "--framework", framework, "--model", *model.split(),
                  "--epochs", str(epochs), *TINY)
    assert done.returncode == 0, done.stderr[-2000:]
    events = read_events(tmp_path / "worker-0.jsonl")
    assert [e["event"] for e in events] == ["start", "first_step"] + ["epoch"] * epochs + ["end"]
    start, end = events[0], events[-1]
    assert start["num_workers"] == 1 and start["dataset"] == "synthetic"
    assert (start["framework"], start["comm"]) == (framework, "local")
    assert start["train_samples"] == 320 and start["val_samples"] == 200
    assert start["steps_per_epoch"] == 20 and start["param_count"] > 0
    assert end["syncs"] == 20 * epochs and end["samples"] == 320 * epochs
    assert 0 < end["train_s"] <= end["elapsed_s"]
    assert end["samples_per_s"] == pytest.approx(end["samples"] / end["train_s"])
    assert end["train_cpu_s"] > 0
    assert all(e["rank"] == 0 and e["t"] > 0 for e in events)
    assert events[1]["t"] <= events[2]["t"]
    accuracy = events[-2]["val_accuracy"]
    assert 0.0 <= accuracy <= 1.0
    if model == "lenet-mlp":  # ten classes: chance is 0.1
        assert accuracy > 0.2


def test_dist_sync_two_workers_by_hand(tmp_path):
    """The engine automates this; here train.py alone proves it works distributed."""
    base = {"DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": str(free_port()),
            "DMLC_NUM_SERVER": "1", "DMLC_NUM_WORKER": "2", "OMP_NUM_THREADS": "1",
            "PS_VERBOSE": "0"}
    infra = [subprocess.Popen([sys.executable, "-c", "import mxnet"],
                              env={**os.environ, **base, "DMLC_ROLE": role},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
             for role in ("scheduler", "server")]
    argv = [sys.executable, "-m", "workloads.train", "--events-dir", str(tmp_path),
            "--model", "lenet-mlp", "--comm", "ps-sync", "--epochs", "2", *TINY]
    workers = [subprocess.Popen(argv, env={**os.environ, **base, "DMLC_ROLE": "worker"},
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True) for _ in range(2)]
    try:
        outputs = [w.communicate(timeout=180)[0] for w in workers]
        assert [w.returncode for w in workers] == [0, 0], outputs
        for p in infra:  # the last worker's exit stops scheduler and server
            p.wait(timeout=30)
    finally:
        for p in infra + workers:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
    ranks = {}
    for rank in (0, 1):
        events = read_events(tmp_path / f"worker-{rank}.jsonl")
        ranks[rank] = events
        assert events[0]["num_workers"] == 2 and events[0]["comm"] == "ps-sync"
        # 320 samples / 2 workers / batch 16 = 10 steps a worker, the same on both.
        assert events[0]["steps_per_epoch"] == 10 and events[-1]["syncs"] == 20
    assert ranks[0][-2]["val_accuracy"] > 0.2
    assert ranks[1][-2]["val_accuracy"] is None  # only rank 0 evaluates


def test_data_error_exits_2_with_event(tmp_path):
    done = _train(tmp_path, "--model", "resnet", "--data-dir", str(tmp_path / "none"), *TINY,
                  "--dataset", "cifar10")
    assert done.returncode == 2
    assert "edgeprof data fetch" in done.stderr and "Traceback" not in done.stderr
    error = read_events(tmp_path / "worker-0.jsonl")[-1]
    assert error["event"] == "error" and error["kind"] == "data"


def test_bad_depth_exits_2(tmp_path):
    done = _train(tmp_path, "--model", "resnet", "--layers", "21", *TINY)
    assert done.returncode == 2 and "6n+2" in done.stderr


def _limit_address_space():
    # Enough to import MXNet or torch and build the net, far from enough for batch 2048.
    limit_bytes = 3 * 1024 ** 3
    resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))


# torch keeps fewer activations than MXNet: ResNet-8 at batch 2048 fits in 3 GB there.
@pytest.mark.parametrize("framework, layers, batch", [("mxnet", 8, 2048), ("torch", 20, 4096)])
def test_out_of_memory_exits_3(tmp_path, framework, layers, batch):
    done = _train(tmp_path, "--framework", framework,
                  "--model", "resnet", "--layers", str(layers), "--batch", str(batch),
                  "--max-samples", str(batch), "--val-samples", "10",
                  preexec_fn=_limit_address_space)
    assert done.returncode == 3, done.stderr[-2000:]
    error = read_events(tmp_path / "worker-0.jsonl")[-1]
    assert error["event"] == "error" and error["kind"] == "oom"
