"""Does ``workloads.train`` train as fast as a plain Gluon or PyTorch loop? Prints the ratio.

``--framework mxnet`` (default) or ``torch``: both sides train the same model (ResNet-20
by default; ``--model lenet-mlp`` for the fastest steps edgeprof runs), batch, synthetic
samples and one thread, one device, each run in its own fresh process (OpenMP settings
are read when MXNet loads). The worker's samples/s comes from its ``end`` event
(training loop only, the step breakdown on as a sweep runs it); the plain loop times its
own loop the same way (first step included, ``waitall`` at the end). Runs alternate,
worker first in even rounds and plain first in odd ones, so that a busy machine slows
both sides alike; each side's median is printed with its spread (min-max), with the
ratio of the medians and the spread of the paired (same round) ratios. Target: >= 0.95.

    .venv/bin/python benchmarks/bench_worker_throughput.py [--samples 960] [--repeats 5]
    .venv/bin/python benchmarks/bench_worker_throughput.py --framework torch \
        --model lenet-mlp --batch 64 --samples 12000
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
SEED = 42
GOAL = 0.95


def plain_loop(samples: int, model: str, layers: int | None,
               batch_size: int) -> tuple[float, float]:
    """The textbook Gluon loop over the same data; (samples/s, samples per CPU second)."""
    import mxnet as mx
    from mxnet import autograd, gluon

    from workloads import models
    from workloads.datasets import loader

    data = loader.load(model, None, max_samples=samples, val_samples=batch_size, seed=SEED)
    mx.random.seed(SEED)
    net = models.build(model, layers)
    net.initialize(mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2))
    net.hybridize()
    trainer = gluon.Trainer(net.collect_params(), "sgd",
                            {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-4})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    x, y = data.x_train, data.y_train.astype("float32")
    steps = len(x) // batch_size
    t0, cpu0 = time.perf_counter(), time.process_time()
    for step in range(steps):
        batch = slice(step * batch_size, (step + 1) * batch_size)
        with autograd.record():
            loss = loss_fn(net(mx.nd.array(x[batch])), mx.nd.array(y[batch]))
        loss.backward()
        trainer.step(batch_size)
    mx.nd.waitall()
    samples = steps * batch_size
    return samples / (time.perf_counter() - t0), samples / (time.process_time() - cpu0)


def plain_torch_loop(samples: int, model: str, layers: int | None,
                     batch_size: int) -> tuple[float, float]:
    """The textbook PyTorch loop over the same data; (samples/s, samples per CPU second)."""
    import torch

    from workloads import torch_models
    from workloads.datasets import loader

    torch.set_num_threads(1)
    data = loader.load(model, None, max_samples=samples, val_samples=batch_size, seed=SEED)
    torch.manual_seed(SEED)
    net = torch_models.build(model, layers)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    x, y = torch.from_numpy(data.x_train), torch.from_numpy(data.y_train.astype("int64"))
    steps = len(x) // batch_size
    t0, cpu0 = time.perf_counter(), time.process_time()
    for step in range(steps):
        batch = slice(step * batch_size, (step + 1) * batch_size)
        optimizer.zero_grad()
        loss_fn(net(x[batch]), y[batch]).backward()
        optimizer.step()
    samples = steps * batch_size
    return samples / (time.perf_counter() - t0), samples / (time.process_time() - cpu0)


def worker_run(samples: int, args) -> tuple[float, float]:
    """(samples/s, samples per CPU second) of ``workloads.train`` from its ``end`` event."""
    from workloads.events import read_events

    layers = ["--layers", str(args.layers)] if args.model == "resnet" else []
    with tempfile.TemporaryDirectory() as events_dir:
        subprocess.run([sys.executable, "-m", "workloads.train",
                        "--framework", args.framework, "--model", args.model, *layers,
                        "--batch", str(args.batch), "--epochs", "1",
                        "--comm", "local", "--threads", "1", "--seed", str(SEED),
                        "--max-samples", str(samples), "--val-samples", str(args.batch),
                        "--events-dir", events_dir], check=True, env=_env(), cwd=ROOT)
        end = read_events(Path(events_dir) / "worker-0.jsonl")[-1]
    return end["samples_per_s"], end["samples"] / end["train_cpu_s"]


def _env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def plain_run(samples: int, args) -> tuple[float, float]:
    out = subprocess.run([sys.executable, __file__, "--plain", "--samples", str(samples),
                          "--framework", args.framework, "--model", args.model,
                          "--layers", str(args.layers), "--batch", str(args.batch)],
                         check=True, env=_env(), capture_output=True, text=True, cwd=ROOT)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return result["samples_per_s"], result["samples_per_cpu_s"]


def spread(values: list[float]) -> str:
    """A median with its min-max range."""
    return (f"{statistics.median(values):8.1f} [{min(values):.1f}-{max(values):.1f}]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=960)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--framework", choices=("mxnet", "torch"), default="mxnet")
    parser.add_argument("--model", choices=("resnet", "lenet-mlp"), default="resnet")
    parser.add_argument("--layers", type=int, default=20, help="ResNet's depth")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--plain", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    layers = args.layers if args.model == "resnet" else None
    if args.plain:
        loop = plain_torch_loop if args.framework == "torch" else plain_loop
        per_s, per_cpu_s = loop(args.samples, args.model, layers, args.batch)
        print(json.dumps({"samples_per_s": per_s, "samples_per_cpu_s": per_cpu_s}))
        return
    worker, plain = [], []
    for i in range(args.repeats):
        sides = (worker_run, plain_run) if i % 2 == 0 else (plain_run, worker_run)
        for side in sides:
            (worker if side is worker_run else plain).append(side(args.samples, args))
    name = f"{args.model}-{layers}" if layers else args.model
    print(f"{args.framework} {name} batch {args.batch}, {args.samples} samples, 1 thread, "
          f"1 device, {args.repeats} runs each, alternating")
    for column, unit in ((0, "samples/s"), (1, "samples/CPU-s")):
        w = [run[column] for run in worker]
        p = [run[column] for run in plain]
        paired = [a / b for a, b in zip(w, p)]
        print(f"{unit:>14}: workloads.train {spread(w)} | plain loop {spread(p)} | ratio "
              f"of medians {statistics.median(w) / statistics.median(p):.3f} (paired "
              f"{min(paired):.3f}-{max(paired):.3f})")
    # Wall-clock rates follow whatever else loads the machine; CPU time per sample does
    # not, so on a shared host the samples/CPU-s ratio is the one to trust.
    print(f"target: ratio >= {GOAL}")


if __name__ == "__main__":
    main()
