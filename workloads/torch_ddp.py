"""The ``torch-ddp`` engine's worker: ``DistributedDataParallel`` over Gloo (ring allreduce).

DDP averages the workers' gradients during the backward pass (bucketed allreduce hooks),
then every worker applies the same SGD step to its own copy: the same update as one
device at the global batch, as Horovod's. Only gradients travel: the buckets are the
gradients themselves (``gradient_as_bucket_view``: no copy in or out), and BatchNorm's
running statistics stay each worker's own (``broadcast_buffers=False``), as with MXNet's
KVStore and Horovod. The weights are made equal once, at construction (DDP broadcasts
rank 0's; every worker also builds them from the same seed).
"""

from __future__ import annotations

from .torch_worker import TorchWorker, init_gloo


class DDPWorker(TorchWorker):
    def join(self) -> None:
        self.rank, self.num_workers = init_gloo()

    def build(self) -> None:
        from torch.nn.parallel import DistributedDataParallel

        super().build()
        self.net = DistributedDataParallel(self.model, gradient_as_bucket_view=True,
                                           broadcast_buffers=False)
