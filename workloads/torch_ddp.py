"""The ``torch-ddp`` engine's worker: ``DistributedDataParallel`` over Gloo (ring allreduce).

DDP averages the workers' gradients during the backward pass (bucketed allreduce hooks),
then every worker applies the same SGD step to its own copy: the same update as one
device at the global batch, as Horovod's. Only gradients travel: the buckets are the
gradients themselves (``gradient_as_bucket_view``: no copy in or out), and BatchNorm's
running statistics stay each worker's own (``broadcast_buffers=False``), as with MXNet's
KVStore and Horovod. The weights are made equal once, at construction (DDP broadcasts
rank 0's; every worker also builds them from the same seed).

Step breakdown: the allreduce overlaps backward's compute, so a communication hook (the
default allreduce, which averages, as DDP's own) notes when the last bucket was
launched: backward's compute ended there, and what backward spent after it was waiting
for the allreduce. Communication hidden under the compute is counted as compute (it
cost the step nothing but CPU).
"""

from __future__ import annotations

import time

from .torch_worker import TorchWorker, init_gloo


class DDPWorker(TorchWorker):
    def join(self) -> None:
        self.rank, self.num_workers = init_gloo()

    def build(self) -> None:
        from torch.nn.parallel import DistributedDataParallel

        super().build()
        self.net = DistributedDataParallel(self.model, gradient_as_bucket_view=True,
                                           broadcast_buffers=False)
        self.last_launch = None
        if self.args.breakdown == "on":
            self.net.register_comm_hook(None, self._timed_allreduce)

    def _timed_allreduce(self, state, bucket):
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        self.last_launch = time.perf_counter()
        return default_hooks.allreduce_hook(None, bucket)

    def exposed_exchange_s(self, t_backward: float) -> float:
        launched, self.last_launch = self.last_launch, None
        return max(0.0, t_backward - launched) if launched is not None else 0.0
