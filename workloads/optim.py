"""The optimizer a worker trains with: SGD defaults per model, and how the step scales.

Defaults (docs/workloads.md#learning-rates gives the measurements behind them): SGD with
momentum 0.9 and weight decay 1e-4, as in both engines' reference examples, and a
learning rate per model that learns on real data at batch 32 to 128 on 1 to 10 sync
workers without diverging.

How each engine turns gradients into a step (so that the same ``--lr`` means the same
thing everywhere):

- ``local`` (one device): the mean gradient over the batch.
- ``dist_sync``: the servers sum the N workers' gradients; the worker normalises by the
  global batch (``trainer.step(batch * N)``), so the step is the mean over N x batch
  samples: the same update as one device at the global batch.
- ``horovod``: ``DistributedTrainer`` averages the workers' gradients, then normalises
  by the worker batch: the same update again.
- ``dist_async``: each worker's push is applied alone, normalised by its own batch: every
  worker moves the weights as one device at that batch would, N times per round, on
  weights up to N-1 pushes old.

``--lr-scaling linear`` (Goyal et al. 2017, what Horovod's examples do with
``lr * hvd.size()``) multiplies the learning rate by N for the synchronous modes, so that
the step per sample stays what it is on one device; async keeps ``lr`` (each update is
already one worker's batch). ``none`` (the default, MXNet's own convention) keeps ``lr``.
"""

from __future__ import annotations

DEFAULT_LR = {"lenet-mlp": 0.02, "lenet-cnn": 0.02, "resnet": 0.05}
DEFAULT_MOMENTUM = 0.9
DEFAULT_WD = 1e-4
LR_SCALINGS = ("none", "linear")
SYNC_KVSTORES = ("dist_sync", "horovod")


def default_lr(model: str) -> float:
    return DEFAULT_LR[model]


def applied_lr(lr: float, scaling: str, kvstore: str, num_workers: int) -> float:
    """The learning rate the optimizer gets for ``lr`` under ``scaling``."""
    if scaling not in LR_SCALINGS:
        raise ValueError(f"unknown lr scaling {scaling!r}: use {' or '.join(LR_SCALINGS)}")
    if scaling == "linear" and kvstore in SYNC_KVSTORES:
        return lr * num_workers
    return lr


def step_samples(batch: int, kvstore: str, num_workers: int) -> int:
    """What ``trainer.step`` normalises the gradient by (see the module docstring)."""
    return batch * num_workers if kvstore == "dist_sync" else batch
