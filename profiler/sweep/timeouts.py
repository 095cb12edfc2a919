"""The default time limit of a cell, derived from what it trains.

A cell that hangs (a lost node, a deadlocked ``dist_sync``) must not hold a sweep of
hundreds of cells forever, yet a legitimate cell must never be cut short. So the default
is generous by design: the time the study's Raspberry Pi 3B boards took for the cell's
work on ONE device (the slowest configuration in the study, Park et al. 2019), times
``SLACK``, plus a start-up allowance. Devices only make a cell faster, except for
LeNet where synchronisation made ten boards 5.4x slower than one; ``SLACK`` covers that.
The emulated ``pi3b`` profile trains 10-20x faster than those boards, so emulated and
local cells get an even wider margin. A user's script (``--script``) has no board
rate: its cells get a fixed 30 minutes (``profiler.engines.script``). ``--timeout S``
overrides it, ``--timeout 0`` turns it off.
"""

from __future__ import annotations

from workloads import models
from workloads.datasets.catalog import SPECS

from ..cell import CellConfig
from ..engines import get_engine

# The training samples per second of one Pi 3B are the model's record's
# (``workloads.models``: ``ModelSpec.board_rate``, with where each rate comes from).
# Validation is a forward pass only: about a third of a training step's cost per sample.
VALIDATION_COST = 1 / 3
SLACK = 10
STARTUP_ALLOWANCE_S = 300.0  # importing MXNet, the scheduler's rendezvous, data loading


def default_timeout_s(cell: CellConfig, val_samples: int | None = None) -> float:
    """Seconds ``cell`` may run before the runner stops it as ``timeout``.

    An engine with a limit of its own (``Engine.default_timeout_s``: the ``script``
    engine's user script has no board rate) gives that instead."""
    own_s = get_engine(cell.engine).default_timeout_s
    if own_s is not None:
        return own_s
    rate = models.get(cell.model).board_rate(cell.layers)
    # The dataset's full size when --max-samples is not given.
    spec = SPECS.get(cell.dataset, SPECS["mnist"])
    train = spec.train_samples
    if cell.max_samples:
        train = min(train, cell.max_samples)
    val = min(spec.test_samples, val_samples or 10**9)
    epoch_s = (train + VALIDATION_COST * val) / rate
    return round(STARTUP_ALLOWANCE_S + SLACK * cell.epochs * epoch_s)


def cell_timeout_s(cell: CellConfig, requested_s: float | None,
                   val_samples: int | None = None) -> float | None:
    """The limit for ``cell``: ``requested_s`` if given (0: none), else the default."""
    if requested_s is None:
        return default_timeout_s(cell, val_samples)
    return requested_s or None
