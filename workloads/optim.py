"""The optimizer a worker trains with: SGD defaults per model, and how the step scales.

Defaults (docs/workloads.md#learning-rates gives the measurements behind them): SGD with
momentum 0.9 and weight decay 1e-4, as in both engines' reference examples, and a
learning rate per model that learns on real data at batch 32 to 128 on 1 to 10 sync
workers without diverging.

How each engine turns gradients into a step (so that the same ``--lr`` means the same
thing everywhere), by ``--comm``:

- ``local`` (one device, any engine): the mean gradient over the batch.
- ``ps-sync``: MXNet's ``dist_sync`` servers sum the N workers' gradients and the worker
  normalises by the global batch (``trainer.step(batch * N)``); the torch parameter
  server averages the N workers' mean gradients. Either way the step is the mean over
  N x batch samples: the same update as one device at the global batch.
- ``allreduce``: Horovod's ``DistributedTrainer`` and torch's DDP average the workers'
  gradients, each the mean over its batch: the same update again.
- ``ps-async``: each worker's push is applied alone, as the mean over its own batch
  (MXNet's ``dist_async``, the torch server's async mode): every worker moves the
  weights as one device at that batch would, N times per round, on weights up to N-1
  pushes old.

The optimizer is SGD with momentum and weight decay in both frameworks, with the same
update: v = momentum * v + (gradient + wd * w), w -= lr * v (MXNet writes it with the
learning rate inside v; for a constant rate it is the same). On a parameter server it
runs on the server(s), which keep the momentum.

``--lr-scaling linear`` (Goyal et al. 2017, what Horovod's examples do with
``lr * hvd.size()``) multiplies the learning rate by N for the synchronous modes, so that
the step per sample stays what it is on one device; async keeps ``lr`` (each update is
already one worker's batch). ``none`` (the default, MXNet's own convention) keeps ``lr``.
"""

from __future__ import annotations

from . import models

DEFAULT_MOMENTUM = 0.9
DEFAULT_WD = 1e-4
LR_SCALINGS = ("none", "linear")
SYNC_COMMS = ("ps-sync", "allreduce")


def default_lr(model: str) -> float:
    """The model's default learning rate (``models.ModelError`` for an unknown model)."""
    return models.get(model).lr


def applied_lr(lr: float, scaling: str, comm: str, num_workers: int) -> float:
    """The learning rate the optimizer gets for ``lr`` under ``scaling``."""
    if scaling not in LR_SCALINGS:
        raise ValueError(f"unknown lr scaling {scaling!r}: use {' or '.join(LR_SCALINGS)}")
    if scaling == "linear" and comm in SYNC_COMMS:
        return lr * num_workers
    return lr


def step_samples(batch: int, comm: str, num_workers: int) -> int:
    """What MXNet's ``trainer.step`` normalises the gradient by (module docstring)."""
    return batch * num_workers if comm == "ps-sync" else batch
