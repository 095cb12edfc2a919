"""Did a cell's training learn, or diverge? Judged from the workers' training losses.

A cell *diverged* when a worker's training loss became NaN or infinite in any epoch, or
when the first epoch ended (the mean loss over its last quarter of steps, averaged over
the workers) no lower than the loss of a uniform guess over the classes, ln(classes):
the model is then no better than chance, and its validation accuracy says nothing about
the system that trained it. Such a cell keeps its status (its time, CPU and network were
measured like any other) and gets ``diverged: true`` with a reason naming the epoch
and the loss, so that no table shows a hyperparameter accident as a systems effect.

A first epoch of fewer than ``MIN_JUDGED_STEPS`` steps is not held to the uniform guess
(``diverged`` stays unset unless a loss was NaN or infinite): a cut-down cell of a few
steps, such as the study's at a small ``--scale``, times the system and cannot be
expected to have learned yet.
"""

from __future__ import annotations

import math
from statistics import mean

from workloads.datasets.catalog import CLASSES  # every dataset edgeprof knows has ten

# LeNet at the default learning rate gets below ln(10) within a few steps; a ResNet's
# first steps may still sit above it.
MIN_JUDGED_STEPS = 10


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def loss_per_epoch(epochs_by_rank: dict[int, list[dict]]) -> list[float | str | None]:
    """Training loss per epoch, the mean over the workers that reported it."""
    count = max((len(events) for events in epochs_by_rank.values()), default=0)
    losses = []
    for index in range(count):
        values = [events[index].get("train_loss") for events in epochs_by_rank.values()
                  if len(events) > index]
        values = [v for v in values if isinstance(v, (int, float))]
        if not values:
            losses.append(None)
        elif all(_finite(v) for v in values):
            losses.append(round(mean(values), 4))
        else:
            # "nan" or "inf" as text: the record stays strict JSON, which has neither.
            losses.append(str(next(v for v in values if not _finite(v))))
    return losses


def judge(epochs_by_rank: dict[int, list[dict]], classes: int | None = CLASSES,
          steps_per_epoch: int | None = None) -> tuple[bool | None, str | None]:
    """``(diverged, reason)``; ``(None, None)`` when no epoch ended (nothing to judge),
    or when an epoch of ``steps_per_epoch`` < ``MIN_JUDGED_STEPS`` ended with finite
    losses (too short to have learned).

    ``epochs_by_rank`` holds each worker's ``epoch`` events in epoch order.
    """
    if not any(epochs_by_rank.values()):
        return None, None
    count = max(len(events) for events in epochs_by_rank.values())
    for index in range(count):
        for rank, events in sorted(epochs_by_rank.items()):
            if len(events) <= index:
                continue
            event = events[index]
            for key in ("train_loss", "train_loss_end"):
                value = event.get(key)
                if value is not None and not _finite(value):
                    return True, (f"diverged: training loss {value} in epoch "
                                  f"{event.get('epoch', index + 1)} (worker {rank})")
    ends = [events[0].get("train_loss_end", events[0].get("train_loss"))
            for events in epochs_by_rank.values() if events]
    ends = [v for v in ends if _finite(v)]
    if not ends or (steps_per_epoch is not None and steps_per_epoch < MIN_JUDGED_STEPS):
        return None, None
    if not classes or classes < 2:  # a loss of unknown meaning: only NaN/inf is judged
        return False, None
    uniform = math.log(classes)
    end_loss = mean(ends)
    if end_loss >= uniform:
        return True, (f"diverged: epoch 1 ended with training loss {end_loss:.3f}, not "
                      f"below ln({classes}) = {uniform:.3f} (a uniform guess): lower --lr, "
                      "or give the cell more steps")
    return False, None
