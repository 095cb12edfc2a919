"""A parameter server over Gloo point-to-point: the ``torch`` engine's server and worker.

Layout: one process group of S servers (ranks 0..S-1) and N workers (ranks S..S+N-1).
The model's parameters are one flat fp32 buffer: on a worker the model's parameters and
gradients are views into two such buffers, so that a push or a pull is one message per
server with no copy. Server s owns the contiguous slice ``slices(P, S)[s]`` of the P
parameters (S = 1 with ``--placement master``; one server per worker node with
``colocated``, as MXNet's KVStore shards keys over its servers), runs the optimizer on
it (SGD with momentum and weight decay: MXNet's ``update_on_kvstore``) and keeps the
momentum.

Protocol, per worker and server, in order on their TCP pair:
1. the worker sends how many pushes it will make (steps x epochs, an int64);
2. the server sends its slice of the initial weights (as ``kv.init`` + pull: every
   worker starts from the server's copy);
3. each step: the worker sends its gradient slice (the mean over its batch) and receives
   the slice of weights the server answers with.

Sync: the server receives all N pushes (the receives are posted first), averages them,
steps, and answers every worker: the same update as one device at the global batch.
Async: the server receives from whichever worker pushes (``recv`` without ``src``
returns the sender), steps at once and answers that worker alone, until every announced
push has arrived. Why not ``reduce``/``broadcast``: Gloo runs them as a ring and a tree,
and the traffic would no longer be a parameter server's.

Each server times its rounds (``workloads.steps``: receiving, updating, sending) into
``steps-server-<rank>.jsonl`` unless ``--breakdown off``.
"""

from __future__ import annotations

import argparse
import time

from . import optim
from .datasets.user import classes as data_classes
from .node_limits import join_cpu_limit
from .steps import StepLog
from .torch_sgd import SGD
from .torch_worker import TorchWorker, env_int, init_gloo, set_threads

SERVERS_ENV = "EDGEPROF_PS_SERVERS"
TAG_COUNT, TAG_WEIGHTS, TAG_GRADIENT = 1, 2, 3


def slices(total: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous ``(start, stop)`` ranges covering ``range(total)``, sizes
    differing by at most one (a server may get an empty range if parts > total)."""
    base, extra = divmod(total, parts)
    bounds, start = [], 0
    for part in range(parts):
        stop = start + base + (1 if part < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def flatten_into_views(model):
    """Make ``model``'s parameters and gradients views of two flat buffers; return them."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    weights = torch.cat([p.detach().reshape(-1) for p in params]).contiguous()
    grads = torch.zeros_like(weights)
    offset = 0
    for p in params:
        n = p.numel()
        p.data = weights[offset:offset + n].view_as(p)
        p.grad = grads[offset:offset + n].view_as(p)
        offset += n
    return weights, grads


class PSWorker(TorchWorker):
    """A worker of the parameter server: pushes gradients, pulls weights."""

    def join(self) -> None:
        global_rank, world = init_gloo()
        self.servers = env_int(SERVERS_ENV)
        self.rank, self.num_workers = global_rank - self.servers, world - self.servers

    def build(self) -> None:
        import torch
        import torch.distributed as dist

        super().build()
        self.weights, self.grads = flatten_into_views(self.model)
        self.slices = slices(self.weights.numel(), self.servers)
        pushes = torch.tensor([self.steps_per_epoch * self.args.epochs], dtype=torch.int64)
        for server in range(self.servers):
            dist.send(pushes, dst=server, tag=TAG_COUNT)
        self._exchange(send=False)  # the servers' initial weights

    def _exchange(self, send: bool = True) -> None:
        import torch.distributed as dist

        requests = []
        for server, (start, stop) in enumerate(self.slices):
            if start == stop:
                continue
            if send:
                requests.append(dist.isend(self.grads[start:stop], dst=server,
                                           tag=TAG_GRADIENT))
            requests.append(dist.irecv(self.weights[start:stop], src=server,
                                       tag=TAG_WEIGHTS))
        for request in requests:
            request.wait()

    def zero_grad(self) -> None:
        self.grads.zero_()  # the views stay: backward accumulates into them

    def communicate(self) -> None:
        self._exchange()

    def update(self) -> None:
        pass  # the servers stepped; the pulled weights are already the model's


def serve(args: argparse.Namespace) -> None:
    """Run one parameter server of the cell until every announced push is answered."""
    import torch
    import torch.distributed as dist

    from . import torch_models

    set_threads(args.threads)
    rank, world = init_gloo()
    servers = env_int(SERVERS_ENV)
    workers = range(servers, world)
    torch.manual_seed(args.seed)
    # A server loads no data: a user's dataset's classes come from its staged file.
    initial, _ = flatten_into_views(torch_models.build(args.model, args.layers,
                                                       data_classes(args.dataset)))
    start, stop = slices(initial.numel(), servers)[rank]
    weights = torch.nn.Parameter(initial[start:stop].clone())
    lr = optim.applied_lr(args.lr, args.lr_scaling, args.comm, len(workers))
    optimizer = SGD([weights], lr=lr, momentum=args.momentum, weight_decay=args.wd)
    # Start-up (importing torch, joining the group, building the initial weights) is
    # over: serve under the node's quota, as a worker trains under it.
    join_cpu_limit()
    pushes = {}
    for worker in workers:
        count = torch.zeros(1, dtype=torch.int64)
        dist.recv(count, src=worker, tag=TAG_COUNT)
        pushes[worker] = int(count)
    if start == stop:
        return  # more servers than parameters: this one holds nothing
    for worker in workers:
        dist.send(weights.detach(), dst=worker, tag=TAG_WEIGHTS)
    log = StepLog(args.events_dir, "server", rank, enabled=args.breakdown == "on")
    try:
        if args.comm == "ps-sync":
            if len(set(pushes.values())) != 1:
                raise RuntimeError(f"sync workers announced different step counts: {pushes}")
            _serve_sync(weights, optimizer, list(workers), next(iter(pushes.values())), log)
        else:
            _serve_async(weights, optimizer, sum(pushes.values()), servers, log)
    finally:
        log.flush()


def _serve_sync(weights, optimizer, workers: list[int], rounds: int, log: StepLog) -> None:
    import torch
    import torch.distributed as dist

    clock = time.perf_counter
    received = torch.zeros((len(workers), weights.numel()))
    for round_ in range(rounds):
        t_ready = clock()
        requests = [dist.irecv(received[i], src=worker, tag=TAG_GRADIENT)
                    for i, worker in enumerate(workers)]
        for request in requests:
            request.wait()
        t_received = clock()
        weights.grad = received.mean(dim=0)
        optimizer.step()
        t_updated = clock()
        answers = [dist.isend(weights.detach(), dst=worker, tag=TAG_WEIGHTS)
                   for worker in workers]
        for answer in answers:
            answer.wait()
        if log.enabled:
            log.add(round=round_, t=log.wall(t_ready), recv_s=t_received - t_ready,
                    update_s=t_updated - t_received, send_s=clock() - t_updated)


def _serve_async(weights, optimizer, pushes: int, servers: int, log: StepLog) -> None:
    import torch
    import torch.distributed as dist

    clock = time.perf_counter
    gradient = torch.zeros(weights.numel())
    for round_ in range(pushes):
        t_ready = clock()
        sender = dist.recv(gradient, tag=TAG_GRADIENT)  # from whichever worker pushed
        t_received = clock()
        weights.grad = gradient
        optimizer.step()
        t_updated = clock()
        dist.send(weights.detach(), dst=sender, tag=TAG_WEIGHTS)
        if log.enabled:
            log.add(round=round_, t=log.wall(t_ready), recv_s=t_received - t_ready,
                    update_s=t_updated - t_received, send_s=clock() - t_updated,
                    worker=sender - servers)
