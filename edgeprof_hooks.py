"""The one call a user's training script may make to edgeprof: ``log(**values)``.

::

    try:
        from edgeprof_hooks import log
    except ImportError:  # edgeprof not installed: the script runs without it
        log = None
    ...
    if log is not None:
        log(epoch=epoch, val_accuracy=accuracy, train_loss=loss)

Under ``python -m workloads.script_launcher`` (what ``edgeprof sweep --script`` starts
on each node) every call becomes an ``epoch`` event of the cell: ``epoch`` (the
epoch number; counted 1, 2, ... when left out), ``val_accuracy``, ``train_loss`` and
``val_loss`` are understood and fill the results' ``epoch_s``, ``val_accuracy`` and
loss columns; any other name is kept in the event as it is (numbers, strings,
booleans). Outside the launcher (a plain ``python train.py``) ``log`` does nothing, so
the script needs no edgeprof to run.

A top-level module that imports nothing but the standard library, so that it is
importable on a node that has only torch and edgeprof's launcher; the launcher
installs the receiver (``_set_receiver``).
"""

from __future__ import annotations

from typing import Any, Callable

_receiver: Callable[[dict[str, Any]], None] | None = None


def log(**values: Any) -> None:
    """Report this epoch's values (``epoch``, ``val_accuracy``, ``train_loss``,
    ``val_loss``, or names of your own); nothing happens outside edgeprof."""
    if _receiver is not None:
        _receiver(values)


def _set_receiver(receiver: Callable[[dict[str, Any]], None] | None) -> None:
    """The launcher's side: where ``log``'s values go (None: nowhere)."""
    global _receiver
    _receiver = receiver
