"""The PyTorch worker alone on one device, and the loop the torch engines share.

``TorchWorker`` trains ``workloads.torch_models`` (the MXNet models layer for layer)
with SGD (momentum, weight decay; ``workloads.optim``; ``workloads.torch_sgd``: torch's
own update without the 68 MB that ``torch.optim.SGD`` costs in ``torch._dynamo``) and
softmax cross-entropy, the mean over the batch. The engines' workers subclass it and
replace two steps: ``communicate`` (after the backward pass: push and pull, or nothing
when DDP's hooks already averaged the gradients) and ``update`` (a local optimizer step,
or nothing when the parameter server runs the optimizer).

Threads: torch's default thread count is the machine's cores, which ignores a node's
CPU quota (cgroups), so ``--threads`` is set before any tensor work, with one inter-op
thread. The loss is summed as a tensor and read once per epoch, as MXNet's loop does.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

from . import optim
from .torch_sgd import SGD
from .worker import Worker

# Gloo's collectives and point-to-point waits time out after this (torch's default is
# 30 min): long enough for a Pi-class node to import torch while its peers wait, and
# for the slowest step of a deep model on a slow node.
GLOO_TIMEOUT_S = 600


def set_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # already set (an earlier call in this process): it can be set once only


def init_gloo() -> tuple[int, int]:
    """Join the cell's Gloo process group from the engine's environment (``MASTER_ADDR``,
    ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``; ``GLOO_SOCKET_IFNAME`` chooses the
    interface); return ``(rank, world_size)``."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method="env://",
                            timeout=timedelta(seconds=GLOO_TIMEOUT_S))
    return dist.get_rank(), dist.get_world_size()


class TorchWorker(Worker):
    framework = "torch"
    teardown = False

    def __init__(self, args):
        super().__init__(args)
        set_threads(args.threads)

    def build(self) -> None:
        import torch

        from . import torch_models

        args = self.args
        torch.manual_seed(args.seed)  # every process builds the same initial weights
        # With the data's classes: a user's dataset may have other than 10.
        self.model = torch_models.build(args.model, args.layers, self.data.classes)
        self.net = self.model  # what the loop calls (DDP wraps the model)
        self.lr_applied = optim.applied_lr(args.lr, args.lr_scaling, args.comm,
                                           self.num_workers)
        self.optimizer = SGD(self.model.parameters(), lr=self.lr_applied,
                             momentum=args.momentum, weight_decay=args.wd)
        self.loss_fn = torch.nn.CrossEntropyLoss()

    def parameter_count(self) -> int:
        from . import torch_models

        return torch_models.count_parameters(self.model)

    def communicate(self) -> None:
        """After the backward pass: make the gradients the cell's (nothing alone)."""

    def update(self) -> None:
        """Apply the step to this process's parameters."""
        self.optimizer.step()

    def zero_grad(self) -> None:
        self.optimizer.zero_grad()

    def train_epoch(self, epoch: int, on_first_step) -> tuple[float, float]:
        import torch

        self.model.train()
        loss_sum = torch.zeros(())
        tail_sum = torch.zeros(())
        log, clock = self.step_log, time.perf_counter
        # torch on a CPU is synchronous: every phase has ended when its call returns, so
        # every step is timed. A step runs from the previous one's end (the batch is
        # prepared in the loop's header) to the end of its update.
        t_begin = clock()
        for step, images, labels in self.batches(epoch):
            data = torch.from_numpy(images)
            label = torch.from_numpy(labels.astype("int64", copy=False))
            t_data = clock()
            self.zero_grad()
            loss = self.loss_fn(self.net(data), label)
            loss.backward()
            t_backward = clock()
            self.communicate()
            t_exchanged = clock()
            self.update()
            detached = loss.detach()
            loss_sum += detached
            if step >= self.tail_start:
                tail_sum += detached
            self.syncs += 1
            t_end = clock()
            if log.enabled:
                exposed = self.exposed_exchange_s(t_backward)
                log.add(epoch=epoch, step=step, t=log.wall(t_begin), data_s=t_data - t_begin,
                        compute_s=(t_backward - t_data - exposed) + (t_end - t_exchanged),
                        exchange_s=exposed + (t_exchanged - t_backward),
                        step_s=t_end - t_begin)
            if on_first_step is not None:
                on_first_step()  # torch on CPU is synchronous: the update has finished
                on_first_step = None
            t_begin = clock()
        # The loss is the batch mean; the events report means per sample.
        return (float(loss_sum) / self.steps_per_epoch,
                float(tail_sum) / (self.steps_per_epoch - self.tail_start))

    def exposed_exchange_s(self, t_backward: float) -> float:
        """Communication that backward waited for after its own compute (DDP's allreduce
        of the last buckets); 0 where nothing communicates inside backward."""
        return 0.0

    def accuracy(self) -> float:
        import torch

        self.model.eval()  # BatchNorm on its running statistics, as MXNet's inference
        correct = 0
        with torch.no_grad():
            for images, labels in self.test_batches():
                out = self.model(torch.from_numpy(images))
                correct += int((out.argmax(dim=1).numpy() == labels).sum())
        self.model.train()
        return correct / max(len(self.data.x_test), 1)


def env_int(name: str) -> int:
    return int(os.environ[name])
