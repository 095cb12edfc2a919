"""What every framework's worker shares: the data shard, the epoch loop and its events.

A framework's worker (``workloads.mxnet_worker``, ``workloads.torch_worker`` and the
torch engines' ``torch_ps`` and ``torch_ddp``) subclasses ``Worker`` and fills in four
steps: ``join`` (learn rank and size: blocks until every process of the cell is up),
``build`` (model, optimizer and communication), ``train_epoch`` and ``accuracy``.
``Worker.run`` does the rest the same way for all of them: the node's CPU limit joined
once start-up is over, the ``start``, ``first_step``, ``epoch`` and ``end`` events with
the same fields, training time and CPU time measured around the same code.

Data (``--data-partition``): with ``shard`` each worker trains on its own contiguous
1/N shard with the same number of steps per epoch (a sync barrier deadlocks otherwise):
an epoch is one pass over the set by the cell, N x fewer steps per worker than alone,
each a global batch of N x ``--batch``. With ``replicate`` every worker trains the
whole set in its own shuffled order (MXNet's MNIST example, which the study ran): an
epoch is one pass per worker, as many steps as one device takes, each a global batch of
N x ``--batch``, so N x the samples of a sharded epoch. Images are uint8, normalized
one batch at a time. Rank 0 measures validation accuracy after every epoch. Each epoch
event carries the training loss (the epoch's mean, and the mean over its last quarter of
steps, which the controller uses to tell a run that learns from one that diverged).

Where each step's time goes (``--breakdown on``, the default): the framework's loop
times its steps into ``self.step_log`` (``workloads.steps`` says what is measured and
how), written at the end of every epoch.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from profiler.errors import ConfigError

from .node_limits import join_cpu_limit
from .events import NODE_ENV, maxrss_mb
from .steps import StepLog

# Phrases frameworks use for a failed allocation (MXNet's std::bad_alloc and CPU storage
# manager, torch's DefaultCPUAllocator).
OOM_MARKERS = ("bad_alloc", "out of memory", "failed to allocate", "can't allocate memory",
               "not enough memory")


class Worker:
    """One worker's training run; the attributes are what the events report."""

    framework = ""
    # Whether the process runs the interpreter's teardown after a clean end: MXNet's
    # KVStore stops its servers there; torch's teardown can abort (``workloads.train``).
    teardown = True

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.rank, self.num_workers = 0, 1
        self.syncs = 0  # communication rounds: KVStore push/pull, PS round, allreduce step
        self.lr_applied = args.lr
        self.step_log = StepLog(None, "worker", 0, enabled=False)  # set by ``run``
        # Where the start-up went, in seconds by phase (``workloads.train`` and
        # ``prepare`` fill it in; the ``start`` event carries it).
        self.startup_s: dict[str, float] = {}
        self.counts_samples = True  # whether this process's samples are the cell's

    # -- what a framework fills in -------------------------------------------------
    def join(self) -> None:
        """Join the cluster: set ``rank`` and ``num_workers``."""

    def build(self) -> None:
        """Model, optimizer and communication, once the data is loaded."""
        raise NotImplementedError

    def parameter_count(self) -> int:
        """Trainable parameters of the model ``build`` made (what a step moves)."""
        raise NotImplementedError

    def train_epoch(self, epoch: int, on_first_step) -> tuple[float, float]:
        """One pass over the shard (``batches(epoch)``); returns the mean training loss
        over the epoch and over its last quarter of steps. Calls ``on_first_step()``
        once the first step's update has finished, if it is given."""
        raise NotImplementedError

    def accuracy(self) -> float:
        """Validation accuracy of the current model on ``data.x_test``."""
        raise NotImplementedError

    def is_oom(self, exc: BaseException) -> bool:
        """Whether ``exc`` is the framework running out of memory."""
        if isinstance(exc, MemoryError):
            return True
        text = str(exc).lower()
        return any(marker in text for marker in OOM_MARKERS)

    def data_shard(self) -> tuple[int, int]:
        """Which shard of the data this process trains, of how many (its rank of the
        workers; a pipeline's stages share their pipeline's)."""
        return self.rank, self.num_workers

    def start_fields(self) -> dict:
        """What an engine adds to the ``start`` event (a pipeline stage's place)."""
        return {}

    def epoch_accuracy(self) -> float | None:
        """Validation accuracy after an epoch, as rank 0 reports it (None elsewhere).
        Called on every process: an engine whose model is spread over several (a
        pipeline) needs them all."""
        return self.accuracy() if self.rank == 0 else None

    # -- shared ------------------------------------------------------------------------
    def prepare(self) -> None:
        """The data shard (uint8, normalized per batch), then the framework's ``build``."""
        from .datasets import loader, resolver

        args = self.args
        t_data = time.perf_counter()
        # replicate: every worker loads the whole set, as one worker alone would.
        shard, shards = self.data_shard()
        parts = resolver.parts(args.data_partition, shards)
        self.data = loader.load(args.model, args.data_dir, args.max_samples,
                                  args.val_samples, args.seed, shard if parts > 1 else 0,
                                  parts,
                                  raw=True, dataset=args.dataset)
        self.steps_per_epoch = len(self.data.x_train) // args.batch
        if self.steps_per_epoch == 0:
            raise ConfigError(f"{len(self.data.x_train)} samples per worker make no batch "
                              f"of {args.batch}: raise --max-samples or lower --batch")
        self.tail_start = self.steps_per_epoch - max(1, self.steps_per_epoch // 4)
        t_build = time.perf_counter()
        self.build()
        self.startup_s.update(data=t_build - t_data, build=time.perf_counter() - t_build)

    def data_digest(self) -> str:
        """A short hash of the training samples this worker holds: equal across the
        workers of a replicated cell, different between shards. 64 images spread over
        the set and every label: a whole CIFAR-10 set is 150 MB to hash on a Pi."""
        import hashlib

        x = self.data.x_train
        digest = hashlib.blake2b(digest_size=8)
        digest.update(np.ascontiguousarray(x[::max(1, len(x) // 64)]).data)
        digest.update(np.ascontiguousarray(self.data.y_train).data)
        return digest.hexdigest()

    def batches(self, epoch: int):
        """``(step, images, labels)`` of one epoch: normalized float32 NCHW images and
        int64 labels as NumPy arrays, in this worker's shuffled order."""
        batch = self.args.batch
        order = np.random.default_rng([self.args.seed, self.data_shard()[0], epoch]).permutation(
            self.steps_per_epoch * batch)
        for step in range(self.steps_per_epoch):
            idx = order[step * batch:(step + 1) * batch]
            yield step, self.data.normalize(self.data.x_train[idx]), self.data.y_train[idx]

    def test_batches(self):
        """``(images, labels)`` of the validation set, normalized, in batches."""
        batch = self.args.batch
        x, y = self.data.x_test, self.data.y_test
        for start in range(0, len(x), batch):
            yield self.data.normalize(x[start:start + batch]), y[start:start + batch]

    def run(self, events) -> None:
        args = self.args
        # Start-up is over: from here on the node's CPU quota applies (emulated cluster).
        join_cpu_limit()
        started = time.time()
        self.step_log = StepLog(args.events_dir, "worker", self.rank,
                                enabled=args.breakdown == "on")
        events.emit("start", num_workers=self.num_workers, framework=self.framework,
                    node=os.environ.get(NODE_ENV), breakdown=args.breakdown,
                    comm=args.comm, model=args.model, layers=args.layers, batch=args.batch,
                    dataset=self.data.name, train_samples=self.data.train_total,
                    classes=self.data.classes,
                    data_partition=args.data_partition,
                    worker_samples=len(self.data.x_train), data_digest=self.data_digest(),
                    val_samples=len(self.data.x_test), steps_per_epoch=self.steps_per_epoch,
                    lr=args.lr, lr_applied=self.lr_applied, lr_scaling=args.lr_scaling,
                    momentum=args.momentum, wd=args.wd,
                    startup_s={k: round(v, 3) for k, v in self.startup_s.items()
                               if v is not None},
                    param_count=self.parameter_count(), **self.start_fields())
        train_s = train_cpu_s = 0.0
        first_done: list[float] = []

        def first_step() -> None:
            first_done.append(time.perf_counter())
            events.emit("first_step")

        for epoch in range(1, args.epochs + 1):
            t0, cpu0 = time.perf_counter(), time.process_time()
            loss, loss_end = self.train_epoch(epoch, first_step if epoch == 1 else None)
            epoch_s = time.perf_counter() - t0
            self.step_log.flush()
            # The first step pays one-off costs (MKL-DNN's set-up, the first round with
            # the servers): what a cut-down cell's steady rate is measured without.
            first = {"first_step_s": first_done[0] - t0} if epoch == 1 and first_done else {}
            train_s += epoch_s
            # All threads of this process: the framework's engine and OpenMP included.
            train_cpu_s += time.process_time() - cpu0
            accuracy = self.epoch_accuracy()
            events.emit("epoch", epoch=epoch, epoch_s=epoch_s, **first, train_loss=loss,
                        train_loss_end=loss_end,
                        val_accuracy=accuracy, samples=self.steps_per_epoch * args.batch)
        # A pipeline's samples are counted once, at its first stage.
        samples = self.steps_per_epoch * args.batch * args.epochs if self.counts_samples else 0
        events.emit("end", elapsed_s=time.time() - started, train_s=train_s, samples=samples,
                    samples_per_s=samples / train_s if train_s > 0 else None,
                    train_cpu_s=train_cpu_s,
                    syncs=self.syncs, **maxrss_mb())
        self.finish()

    def finish(self) -> None:
        """Leave the cluster after the ``end`` event (a framework's clean shutdown)."""
