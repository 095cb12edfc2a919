"""Does ``workloads.train`` train as fast as a plain Gluon or PyTorch loop? Prints the ratio.

``--framework mxnet`` (default) or ``torch``: both sides train ResNet-20, batch 32, on
the same synthetic samples, one thread,
each in its own fresh process (OpenMP settings are read when MXNet loads). The worker's
samples/s comes from its ``end`` event (training loop only); the plain loop times its
own loop the same way (first step included, ``waitall`` at the end). Runs alternate so
that a busy machine slows both sides alike; the medians are compared. Target: >= 0.95.

    .venv/bin/python benchmarks/bench_worker_throughput.py [--samples 960] [--repeats 3]
    .venv/bin/python benchmarks/bench_worker_throughput.py --framework torch
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from a checkout
MODEL, LAYERS, BATCH, SEED = "resnet", 20, 32, 42


def plain_loop(samples: int) -> tuple[float, float]:
    """The textbook Gluon loop over the same data; (samples/s, samples per CPU second)."""
    import mxnet as mx
    from mxnet import autograd, gluon

    from workloads import models
    from workloads.datasets import loader

    data = loader.load(MODEL, None, max_samples=samples, val_samples=BATCH, seed=SEED)
    mx.random.seed(SEED)
    net = models.build(MODEL, LAYERS)
    net.initialize(mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2))
    net.hybridize()
    trainer = gluon.Trainer(net.collect_params(), "sgd",
                            {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-4})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    x, y = data.x_train, data.y_train.astype("float32")
    steps = len(x) // BATCH
    t0, cpu0 = time.perf_counter(), time.process_time()
    for step in range(steps):
        batch = slice(step * BATCH, (step + 1) * BATCH)
        with autograd.record():
            loss = loss_fn(net(mx.nd.array(x[batch])), mx.nd.array(y[batch]))
        loss.backward()
        trainer.step(BATCH)
    mx.nd.waitall()
    samples = steps * BATCH
    return samples / (time.perf_counter() - t0), samples / (time.process_time() - cpu0)


def plain_torch_loop(samples: int) -> tuple[float, float]:
    """The textbook PyTorch loop over the same data; (samples/s, samples per CPU second)."""
    import torch

    from workloads import torch_models
    from workloads.datasets import loader

    torch.set_num_threads(1)
    data = loader.load(MODEL, None, max_samples=samples, val_samples=BATCH, seed=SEED)
    torch.manual_seed(SEED)
    net = torch_models.build(MODEL, LAYERS)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    x, y = torch.from_numpy(data.x_train), torch.from_numpy(data.y_train.astype("int64"))
    steps = len(x) // BATCH
    t0, cpu0 = time.perf_counter(), time.process_time()
    for step in range(steps):
        batch = slice(step * BATCH, (step + 1) * BATCH)
        optimizer.zero_grad()
        loss_fn(net(x[batch]), y[batch]).backward()
        optimizer.step()
    samples = steps * BATCH
    return samples / (time.perf_counter() - t0), samples / (time.process_time() - cpu0)


def worker_run(samples: int, framework: str = "mxnet") -> tuple[float, float]:
    """(samples/s, samples per CPU second) of ``workloads.train`` from its ``end`` event."""
    from workloads.events import read_events

    with tempfile.TemporaryDirectory() as events_dir:
        subprocess.run([sys.executable, "-m", "workloads.train", "--framework", framework,
                        "--model", MODEL,
                        "--layers", str(LAYERS), "--batch", str(BATCH), "--epochs", "1",
                        "--comm", "local", "--threads", "1", "--seed", str(SEED),
                        "--max-samples", str(samples), "--val-samples", str(BATCH),
                        "--events-dir", events_dir], check=True, env=_env(), cwd=ROOT)
        end = read_events(Path(events_dir) / "worker-0.jsonl")[-1]
    return end["samples_per_s"], end["samples"] / end["train_cpu_s"]


def _env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def plain_run(samples: int, framework: str = "mxnet") -> tuple[float, float]:
    out = subprocess.run([sys.executable, __file__, "--plain", "--samples", str(samples),
                          "--framework", framework],
                         check=True, env=_env(), capture_output=True, text=True, cwd=ROOT)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return result["samples_per_s"], result["samples_per_cpu_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=960)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--framework", choices=("mxnet", "torch"), default="mxnet")
    parser.add_argument("--plain", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plain:
        loop = plain_torch_loop if args.framework == "torch" else plain_loop
        per_s, per_cpu_s = loop(args.samples)
        print(json.dumps({"samples_per_s": per_s, "samples_per_cpu_s": per_cpu_s}))
        return
    worker, plain = [], []
    for _ in range(args.repeats):
        worker.append(worker_run(args.samples, args.framework))
        plain.append(plain_run(args.samples, args.framework))
    print(f"{args.framework} resnet-{LAYERS} batch {BATCH}, {args.samples} samples, "
          f"1 thread, {args.repeats} runs each")
    for column, unit in ((0, "samples/s"), (1, "samples/CPU-s")):
        w = [run[column] for run in worker]
        p = [run[column] for run in plain]
        print(f"{unit:>14}: workloads.train median {statistics.median(w):6.1f} best "
              f"{max(w):6.1f} | plain loop median {statistics.median(p):6.1f} best "
              f"{max(p):6.1f} | ratio median {statistics.median(w) / statistics.median(p):.3f}"
              f" best {max(w) / max(p):.3f}")
    # Wall-clock rates follow whatever else loads the machine; CPU time per sample does
    # not, so on a shared host the samples/CPU-s ratio is the one to trust.
    print("target: ratio >= 0.95")

if __name__ == "__main__":
    main()
