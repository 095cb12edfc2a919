"""The MXNet Gluon worker: KVStore ``local``, ``dist_sync``, ``dist_async``, or Horovod.

``--comm`` maps to MXNet as ``local`` -> kvstore ``local``, ``ps-sync`` -> ``dist_sync``,
``ps-async`` -> ``dist_async`` (rank and worker count from the KVStore, which reads the
``DMLC_*`` environment the engine sets) and ``allreduce`` -> Horovod
(``workloads.hvd``). The optimizer runs on the servers (``update_on_kvstore``):
``dist_async`` needs it there. How the step is normalised: ``workloads.optim``.

The hot loop never waits for a result: loss is summed on the device and read once per
epoch, so MXNet's engine overlaps copy, compute and communication as in a plain loop.

Step breakdown: Python only queues work on that engine, so a step's phases can be timed
only by waiting for them, which would stop the overlap being measured. One step in 100
(one an epoch in shorter epochs, mid-epoch: ``workloads.steps.sampled``) is timed
alone: the engine is drained first (the time is the line's ``drain_s``), then forward
and backward are waited for (compute), then the trainer's step (push, the servers'
update, pull; or Horovod's allreduce: the exchange). The other steps run untouched. A
timed step lacks the overlap of its neighbours, so its phases are the costs of each part,
and their sum can exceed the mean step time of an epoch (``breakdown_vs_step`` in the
results shows by how much).
"""

from __future__ import annotations

import os
import time

from . import optim
from .steps import SAMPLE_EVERY, sampled
from .worker import Worker

KVSTORES = {"local": "local", "ps-sync": "dist_sync", "ps-async": "dist_async",
            "allreduce": "horovod"}
# MXNet's engine when MXNET_ENGINE_TYPE is unset (src/engine/engine.cc).
DEFAULT_ENGINE_TYPE = "ThreadedEnginePerDevice"


def engine_type() -> str:
    """The engine MXNet runs this process's work on: the environment's
    ``MXNET_ENGINE_TYPE`` (the controller's, or on an emulated node the one its
    profile's ``env_by_model`` gives the cell's model), else MXNet's default.
    Recorded, because it moves what a small model's cell measures (docs/study.md: the
    per-device pool's threads under a quota of a few hundredths of a core)."""
    return os.environ.get("MXNET_ENGINE_TYPE", DEFAULT_ENGINE_TYPE)


class MXNetWorker(Worker):
    framework = "mxnet"

    def __init__(self, args):
        super().__init__(args)
        import mxnet  # noqa: F401 - here, so that start-up's "framework" phase holds it

        self.kvstore = KVSTORES[args.comm]
        self.kv = None

    @property
    def teardown(self) -> bool:
        # dist_sync and dist_async: the KVStore's destructor, in the interpreter's
        # teardown, stops the servers. Horovod has left in ``finish`` (workloads.hvd).
        return self.kvstore != "horovod"

    def finish(self) -> None:
        if self.kvstore == "horovod":
            from . import hvd

            hvd.shutdown()

    def join(self) -> None:
        import mxnet as mx

        if self.kvstore.startswith("dist"):
            self.kv = mx.kv.create(self.kvstore)
            self.rank, self.num_workers = self.kv.rank, self.kv.num_workers
        elif self.kvstore == "horovod":
            from . import hvd

            self.rank, self.num_workers = hvd.init()

    def start_fields(self) -> dict:
        return {"mxnet_engine": engine_type()}

    def parameter_count(self) -> int:
        from . import gluon_models, models

        return gluon_models.count_parameters(self.net, models.get(self.args.model))

    def build(self) -> None:
        """Initialized hybridized net and its trainer."""
        import mxnet as mx
        from mxnet import gluon

        from . import gluon_models, models

        args = self.args
        mx.random.seed(args.seed)
        net = models.build(args.model, args.layers, self.data.classes)  # the data's
        net.initialize(gluon_models.initializer(models.get(args.model)))
        net.hybridize(static_alloc=True)
        # Deferred init: shapes exist only after a forward pass, and the trainer
        # (Horovod's start from rank 0, the KVStore's init) needs them.
        net(mx.nd.zeros((args.batch, *models.input_shape(args.model)))).wait_to_read()
        self.net = net
        self.lr_applied = optim.applied_lr(args.lr, args.lr_scaling, args.comm,
                                           self.num_workers)
        opts = {"learning_rate": self.lr_applied, "momentum": args.momentum, "wd": args.wd}
        params = net.collect_params()
        if self.kvstore == "horovod":
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
        self.step_samples = optim.step_samples(args.batch, args.comm, self.num_workers)
        self.loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    def train_epoch(self, epoch: int, on_first_step) -> tuple[float, float]:
        import mxnet as mx
        from mxnet import autograd

        batch = self.args.batch
        loss_sum = mx.nd.zeros((1,))
        tail_sum = mx.nd.zeros((1,))
        log, clock = self.step_log, time.perf_counter
        for step, images, labels in self.batches(epoch):
            timed = log.enabled and sampled(step, self.steps_per_epoch)
            if timed:
                t_drain = clock()
                mx.nd.waitall()  # this step alone: the earlier steps' work has ended
                t_begin = clock()
            data, label = mx.nd.array(images), mx.nd.array(labels)
            if timed:
                t_data = clock()
            with autograd.record():
                loss = self.loss_fn(self.net(data), label)
            loss.backward()
            if timed:
                mx.nd.waitall()
                t_compute = clock()
            self.trainer.step(self.step_samples)
            loss_sum += loss.sum()
            if step >= self.tail_start:
                tail_sum += loss.sum()
            self.syncs += 1
            if timed:
                mx.nd.waitall()
                t_end = clock()
                if self.kvstore == "local":  # the trainer's step is a local update
                    t_compute = t_end
                log.add(epoch=epoch, step=step, t=log.wall(t_begin), data_s=t_data - t_begin,
                        compute_s=t_compute - t_data, exchange_s=t_end - t_compute,
                        step_s=t_end - t_begin, drain_s=t_begin - t_drain,
                        every=SAMPLE_EVERY)
            if on_first_step is not None:
                mx.nd.waitall()  # the update, not only the forward, has finished
                on_first_step()
                on_first_step = None
        mx.nd.waitall()
        return (float(loss_sum.asscalar()) / (self.steps_per_epoch * batch),
                float(tail_sum.asscalar()) / ((self.steps_per_epoch - self.tail_start) * batch))

    def accuracy(self) -> float:
        import mxnet as mx

        correct = mx.nd.zeros((1,))
        for images, labels in self.test_batches():
            out = self.net(mx.nd.array(images))
            correct += (out.argmax(axis=1) == mx.nd.array(labels)).sum()
        return float(correct.asscalar()) / max(len(self.data.x_test), 1)

    def is_oom(self, exc: BaseException) -> bool:
        # Only MXNet's own errors: a Python MemoryError is caught by the base.
        return isinstance(exc, MemoryError) or (
            type(exc).__name__ == "MXNetError" and super().is_oom(exc))
