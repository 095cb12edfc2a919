"""Cells given the training time a timed ratio needs (``report.ratios.MIN_WINDOW_S``).

A study's grid floors every cell at its fewest steps per worker (park2019: 7), but a
fast model's few-device cells get through them in under a second of the host's clock:
LeNet-MLP's one-device cell at ``--scale 0.01`` trained 0.6-1.0 s, and the report
judges a time or CPU row of such a cell "too few steps". So, once the grid is built and
dilated, a cell the estimate puts under ``TARGET_S`` of training trains the samples
that lift it there, at most what its dataset holds. Like the floor of steps, this gives
a cell more samples than others of its configuration (the few-device ones, here), so an
accuracy row between them is "not comparable" at such a scale; raising every device
count alike would keep it, at twice the time (``--budget 30m`` then dropped Figure 3 to
keep Table 1 at 6,000 samples a cell). The estimate prices the raised cells, so
``--budget`` pays for them and says what it left out.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable

from workloads.datasets import catalog

from ..cell import CellConfig
from ..report.ratios import MIN_WINDOW_S
from . import estimate
from .base import Study

# The estimate's training time is short of the measured one (LeNet-MLP's one-device
# cell, 600 samples at speedup 2: 0.52 s estimated, 0.6-1.0 s trained over six repeats,
# docs/study.md), so aiming at the window's 1.5 times keeps the shortest cell above it.
TARGET_S = 1.5 * MIN_WINDOW_S


def windowed(study: Study, cells: list[CellConfig],
             rate: Callable[[CellConfig], float]) -> list[CellConfig]:
    """``cells``, each raised to ``TARGET_S`` of training (module doc); ``rate``: a
    cell's one-device rate on its nodes, samples/s of the host's clock (its dilation
    counted: ``estimate.node_rate``). A cell expected to run out of memory is not timed."""
    return [_raised(study, c, rate) for c in cells]


def _raised(study: Study, cell: CellConfig, rate: Callable[[CellConfig], float]) -> CellConfig:
    if not cell.max_samples or study.expected_oom(cell):
        return cell
    seconds = estimate.train_s(study, cell, rate(cell))
    if not 0 < seconds < TARGET_S:
        return cell
    spec = catalog.SPECS.get(cell.dataset)  # a user's folder is not capped here
    wanted = math.ceil(cell.max_samples * TARGET_S / seconds)
    samples = min(wanted, spec.train_samples) if spec else wanted
    return replace(cell, max_samples=samples) if samples > cell.max_samples else cell


def raised_notes(built: list[CellConfig], run: list[CellConfig]) -> list[str]:
    """The plan's line naming the configurations ``windowed`` raised, with the device
    counts it raised (``run`` is ``built`` windowed, in the same order)."""
    raised: dict[str, set[int]] = {}
    for before, after in zip(built, run):
        if after.max_samples != before.max_samples:
            name = f"{after.model}{'-' + str(after.layers) if after.layers else ''} x " \
                f"{after.batch}"
            raised.setdefault(name, set()).add(after.devices)
    if not raised:
        return []
    return [f"raised to {MIN_WINDOW_S:g} s of training (a time ratio's least; more samples "
            "than the scale): " + ", ".join(
                f"{name} on {_counts(sorted(devices))} device{'' if devices == {1} else 's'}"
                for name, devices in sorted(raised.items()))]


def _counts(devices: list[int]) -> str:
    """``1-3``, ``1, 4, 10``."""
    if devices == list(range(devices[0], devices[-1] + 1)) and len(devices) > 2:
        return f"{devices[0]}-{devices[-1]}"
    return ", ".join(map(str, devices))
