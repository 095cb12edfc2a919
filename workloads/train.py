"""The training entry point every worker runs: ``python -m workloads.train --model ...``.

The engine builds the command line (``profiler.engines.base.train_argv``) and the
environment: for ``--kvstore dist_sync|dist_async`` the ``DMLC_*`` variables of an MXNet
parameter-server worker (rank and worker count then come from the KVStore), for
``--kvstore horovod`` whatever ``horovodrun``/the engine sets (``workloads.hvd``).

Training: SGD (``workloads.optim``: per-model learning rate, momentum 0.9, weight decay
1e-4 by default), softmax cross-entropy, each worker on its own contiguous 1/N shard with
the same number of steps per epoch (a sync barrier deadlocks otherwise). Rank 0 measures
validation accuracy after every epoch. Each epoch event carries the training loss (the
epoch's mean, and the mean over its last quarter of steps, which the controller uses to
tell a run that learns from one that diverged).
The hot loop never waits for a result: loss is summed on the device and read once per
epoch, so MXNet's engine overlaps copy, compute and communication as in a plain loop.

Exit status: 0 ok, 2 data/config error, 3 out of memory, 1 anything else. On an error
the process leaves with ``os._exit``: a normal exit would run the KVStore's and
Horovod's shutdown barriers, which wait forever for the workers still training.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback

from profiler.errors import ConfigError, EdgeprofError

from . import optim
from .node_limits import join_cpu_limit

KVSTORES = ("local", "dist_sync", "dist_async", "horovod")
DMLC_VARIABLES = ("DMLC_ROLE", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT",
                  "DMLC_NUM_SERVER", "DMLC_NUM_WORKER")
# How MXNet words a failed allocation (std::bad_alloc, its CPU storage manager).
OOM_MARKERS = ("bad_alloc", "out of memory", "failed to allocate")
EXIT_OK, EXIT_ERROR, EXIT_CONFIG, EXIT_OOM = 0, 1, 2, 3


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m workloads.train",
                                     description="Train one worker of an edgeprof cell.")
    parser.add_argument("--model", required=True, choices=("lenet-mlp", "lenet-cnn", "resnet"))
    parser.add_argument("--layers", type=int, default=None,
                        help="ResNet depth 6n+2 (default 20); ignored for LeNet")
    parser.add_argument("--batch", type=int, default=32, help="samples per worker step")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--lr", type=float, default=None,
                        help="learning rate (default: the model's, workloads.optim)")
    parser.add_argument("--momentum", type=float, default=optim.DEFAULT_MOMENTUM)
    parser.add_argument("--wd", type=float, default=optim.DEFAULT_WD, help="weight decay")
    parser.add_argument("--lr-scaling", choices=optim.LR_SCALINGS, default="none",
                        help="linear: lr x workers in sync modes (workloads.optim)")
    parser.add_argument("--kvstore", choices=KVSTORES, default="local")
    parser.add_argument("--events-dir", required=True)
    parser.add_argument("--threads", type=int, default=1, help="OpenMP threads")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--max-samples", type=int, default=None,
                        help="cap the whole training set before sharding")
    parser.add_argument("--data-dir", default=None,
                        help="data folder (see workloads.datasets)")
    parser.add_argument("--dataset", default="auto",
                        help="auto or a name of workloads.datasets.NAMES")
    parser.add_argument("--val-samples", type=int, default=None,
                        help="cap the test set used for validation accuracy")
    args = parser.parse_args(argv)
    if args.model == "resnet" and args.layers is None:
        args.layers = 20
    if args.model != "resnet":
        args.layers = None
    if args.lr is None:
        args.lr = optim.default_lr(args.model)
    return args


def _validate(args: argparse.Namespace) -> None:
    from . import models

    try:
        models.parameter_count(args.model, args.layers)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    for name in ("batch", "epochs", "threads", "max_samples", "val_samples"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ConfigError(f"--{name.replace('_', '-')} {value} must be at least 1")
    if args.kvstore.startswith("dist"):
        missing = [v for v in DMLC_VARIABLES if not os.environ.get(v)]
        if missing:
            raise ConfigError(f"--kvstore {args.kvstore} needs {', '.join(missing)} in the "
                              f"environment: start workers through an edgeprof engine")


def _is_oom(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    text = str(exc).lower()
    return type(exc).__name__ == "MXNetError" and any(
        marker in text for marker in OOM_MARKERS)


class _Worker:
    """One worker's training run; the attributes are what the events report."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.rank, self.num_workers = 0, 1
        self.kv = None

    def join(self) -> None:
        """Join the cluster: learn rank and size (blocks until every node is up)."""
        import mxnet as mx

        if self.args.kvstore.startswith("dist"):
            self.kv = mx.kv.create(self.args.kvstore)
            self.rank, self.num_workers = self.kv.rank, self.kv.num_workers
        elif self.args.kvstore == "horovod":
            from . import hvd

            self.rank, self.num_workers = hvd.init()

    def prepare(self):
        """Data shard (uint8, normalized per batch), initialized hybridized net, trainer."""
        import mxnet as mx
        from mxnet import gluon

        from . import datasets, models

        args = self.args
        self.data = datasets.load(args.model, args.data_dir, args.max_samples,
                                  args.val_samples, args.seed, self.rank, self.num_workers,
                                  raw=True, dataset=args.dataset)
        self.y_train = self.data.y_train.astype("float32")
        self.steps_per_epoch = len(self.data.x_train) // args.batch
        if self.steps_per_epoch == 0:
            raise ConfigError(f"{len(self.data.x_train)} samples per worker make no batch "
                              f"of {args.batch}: raise --max-samples or lower --batch")
        mx.random.seed(args.seed)
        net = models.build(args.model, args.layers)
        init = (mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2)
                if args.model == "resnet" else mx.init.Xavier())
        net.initialize(init)
        net.hybridize(static_alloc=True)
        # Deferred init: shapes exist only after a forward pass, and the trainer
        # (Horovod's broadcast, the KVStore's init) needs them.
        net(mx.nd.zeros((args.batch, *models.input_shape(args.model)))).wait_to_read()
        self.net = net
        self.lr_applied = optim.applied_lr(args.lr, args.lr_scaling, args.kvstore,
                                           self.num_workers)
        opts = {"learning_rate": self.lr_applied, "momentum": args.momentum, "wd": args.wd}
        params = net.collect_params()
        if args.kvstore == "horovod":
            from . import hvd

            self.trainer = hvd.trainer(params, "sgd", opts)
        elif self.kv is not None:
            # update_on_kvstore: dist_async needs the optimizer on the servers.
            self.trainer = gluon.Trainer(params, "sgd", opts, kvstore=self.kv,
                                         update_on_kvstore=True)
        else:
            self.trainer = gluon.Trainer(params, "sgd", opts, kvstore="local")
        # dist_sync sums the N workers' gradients on the server: normalize by the
        # global batch. Async applies each push alone; Horovod averages itself.
        self.step_samples = optim.step_samples(args.batch, args.kvstore, self.num_workers)
        self.loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    def train_epoch(self, epoch: int, on_first_step) -> tuple[float, float]:
        """One pass over the shard; returns the mean training loss over the epoch and
        over its last quarter of steps (the loss the epoch ends with)."""
        import mxnet as mx
        import numpy as np
        from mxnet import autograd

        batch = self.args.batch
        order = np.random.default_rng([self.args.seed, self.rank, epoch]).permutation(
            self.steps_per_epoch * batch)
        x, y = self.data.x_train, self.y_train
        loss_sum = mx.nd.zeros((1,))
        tail_sum = mx.nd.zeros((1,))
        tail_start = self.steps_per_epoch - max(1, self.steps_per_epoch // 4)
        for step in range(self.steps_per_epoch):
            idx = order[step * batch:(step + 1) * batch]
            data = mx.nd.array(self.data.normalize(x[idx]))
            label = mx.nd.array(y[idx])
            with autograd.record():
                loss = self.loss_fn(self.net(data), label)
            loss.backward()
            self.trainer.step(self.step_samples)
            loss_sum += loss.sum()
            if step >= tail_start:
                tail_sum += loss.sum()
            self.syncs += 1
            if on_first_step is not None:
                mx.nd.waitall()  # the update, not only the forward, has finished
                on_first_step()
                on_first_step = None
        mx.nd.waitall()
        return (float(loss_sum.asscalar()) / (self.steps_per_epoch * batch),
                float(tail_sum.asscalar()) / ((self.steps_per_epoch - tail_start) * batch))

    def accuracy(self) -> float:
        import mxnet as mx

        batch = self.args.batch
        x, y = self.data.x_test, self.data.y_test.astype("float32")
        correct = mx.nd.zeros((1,))
        for start in range(0, len(x), batch):
            out = self.net(mx.nd.array(self.data.normalize(x[start:start + batch])))
            correct += (out.argmax(axis=1) == mx.nd.array(y[start:start + batch])).sum()
        return float(correct.asscalar()) / max(len(x), 1)

    def run(self, events) -> None:
        args = self.args
        from . import models

        self.syncs = 0
        # Start-up is over: from here on the node's CPU quota applies (emulated cluster).
        join_cpu_limit()
        started = time.time()
        events.emit("start", num_workers=self.num_workers, kvstore=args.kvstore,
                    model=args.model, layers=args.layers, batch=args.batch,
                    dataset=self.data.name, train_samples=self.data.train_total,
                    val_samples=len(self.data.x_test), steps_per_epoch=self.steps_per_epoch,
                    lr=args.lr, lr_applied=self.lr_applied, lr_scaling=args.lr_scaling,
                    momentum=args.momentum, wd=args.wd,
                    param_count=models.parameter_count(args.model, args.layers))
        train_s = train_cpu_s = 0.0
        first_done: list[float] = []

        def first_step() -> None:
            first_done.append(time.perf_counter())
            events.emit("first_step")

        for epoch in range(1, args.epochs + 1):
            t0, cpu0 = time.perf_counter(), time.process_time()
            loss, loss_end = self.train_epoch(epoch, first_step if epoch == 1 else None)
            epoch_s = time.perf_counter() - t0
            # The first step pays one-off costs (MKL-DNN's set-up, the KVStore's first
            # round): what a cut-down cell's steady rate is measured without.
            first = {"first_step_s": first_done[0] - t0} if epoch == 1 and first_done else {}
            train_s += epoch_s
            # All threads of this process: MXNet's engine and OpenMP workers included.
            train_cpu_s += time.process_time() - cpu0
            accuracy = self.accuracy() if self.rank == 0 else None
            events.emit("epoch", epoch=epoch, epoch_s=epoch_s, **first, train_loss=loss,
                        train_loss_end=loss_end,
                        val_accuracy=accuracy, samples=self.steps_per_epoch * args.batch)
        samples = self.steps_per_epoch * args.batch * args.epochs
        events.emit("end", elapsed_s=time.time() - started, train_s=train_s, samples=samples,
                    samples_per_s=samples / train_s if train_s > 0 else None,
                    train_cpu_s=train_cpu_s,
                    syncs=self.syncs)


def _one_line(exc: BaseException) -> str:
    # MXNetError messages carry a C++ stack first and the reason on the last line.
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    reason = lines[-1] if lines else ""
    name = type(exc).__name__
    return reason if reason.startswith(name) else f"{name}: {reason}"


def _fail(events, kind: str, message: str, code: int) -> None:
    if events is not None:
        events.emit("error", kind=kind, message=message)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # OpenMP reads these once, when MXNet's library loads: set them before any import.
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = str(args.threads)
    from .events import EventWriter

    events = None
    try:
        _validate(args)
        worker = _Worker(args)
        worker.join()
        events = EventWriter(args.events_dir, worker.rank)
        worker.prepare()
        worker.run(events)
    except EdgeprofError as exc:
        print(f"error: {exc}", file=sys.stderr)
        _fail(events, "data", str(exc), EXIT_CONFIG)
    except Exception as exc:  # noqa: BLE001 - every failure must reach the events
        traceback.print_exc()
        kind, code = ("oom", EXIT_OOM) if _is_oom(exc) else ("error", EXIT_ERROR)
        _fail(events, kind, _one_line(exc), code)
    events.close()
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
