"""How long a study grid will take, said before it starts.

A cell's time is its start-up, its training and its validation:

- training: ``epochs x samples x f(devices) / rate``, where ``rate`` is the one-device
  rate of the cell's model on this cluster and ``f`` how the study's time changed with
  devices for that model (the study's ``rate`` and ``device_factor``: park2019's
  Tables 1-2 for LeNet; ResNet ran about ``1 / devices``);
- validation: the validation samples at three times the training rate, once an epoch;
- start-up and reaping: ``PROCESS_CPU_S`` of CPU per process (MXNet's import, the
  KVStore's connections, the data) shared by this host's cores, plus ``STARTUP_S``;
  fitted to two runs of ``--budget 30m --repeats 3`` (120 LeNet cells of 1-10
  devices) on the slower of this project's 2-core hosts: about 3 s more a process, in
  wall time on two cores, than the training and validation the rest of this estimate
  gives. The constants before (2 s and 3 s, from a host about twice as fast) left the
  estimate short by 1.75 x there, which a budget must not be; on the faster host the
  estimate now errs on the long side, and a budget runs shorter than it allows;
- ResNet's one-off set-up: its first step builds MKL-DNN's primitives for every layer
  (about ``FIRST_STEP_STEPS`` steps' time) after each worker built and initialized the
  network under its node's quota (``RESNET_SETUP_S`` a device: the workers of a
  synchronous cell wait for the last). Fitted to a study run on this kind of host
  (``--scale 0.01 --speedup 100``: 2-3 times the first estimate's figure on ten
  devices, docs/study.md).

The provider says what its nodes are (``ClusterSettings.speed``). ``rate`` on nodes of
a profile (the emulated cluster) follows the CPU quota the node gets for the model: the
study's own rate on the profile calibrated to it (``Study.profile``), in proportion to
the quota on any other, times the time dilation the cell will get (the largest
calibrated one that fits, up to ``speedup``: ``profiles.dilation``), times the pace
the profile check measured for the model at that dilation when it ran (pace.py: a node
measured 1.3 x the board's rate trains 1.3 x as fast). Real boards
(``inventory``) are taken to be as fast as the study's. Slots of this host (the local
cluster) run at the host's speed, a rough guess (one host core per node). It is an
estimate: the printed figure says so.
"""

from __future__ import annotations

import os

from ..cell import CellConfig
from ..cluster.profiles import Catalog
from ..engines import get_engine
from ..sweep.thrashing import THRASH_S
from .base import Study
from .dilate import alone
from .pace import Paces, pace_of

STARTUP_S = 6.0
PROCESS_CPU_S = 6.0  # MXNet's import, the KVStore's connections, the data: per process
# A cell expected to run out of memory: until it fills its node (about 20 s) and then
# thrashes at the limit for sweep.thrashing.THRASH_S, or its node's limit kills it.
OOM_S = 20.0 + THRASH_S
FIRST_STEP_STEPS = 2.5
RESNET_SETUP_S = 3.5


def node_rate(study: Study, cell: CellConfig, speed: str, profile: str | None,
              catalog: Catalog, speedup: float = 1.0, paces: Paces | None = None) -> float:
    """The one-device training rate (samples/s) the cell's model is expected to have on
    nodes of ``speed`` (``ClusterSettings.speed``: ``board``, ``profile`` or ``host``);
    ``paces``: what the profile check measured on nodes of a profile (pace.py)."""
    rate = study.rate(cell)
    calibrated = catalog.profiles.get(study.profile) if study.profile else None
    if speed == "board" or calibrated is None:
        return rate
    if speed != "profile":
        return rate / calibrated.cpu_cores_for(cell.model)  # a host core per node
    nodes = catalog.node_profiles(profile or study.profile,
                                  get_engine(cell.engine).nodes_needed(cell))
    dilated = alone(cell, profile or study.profile, catalog,
                    cell.speedup_within(speedup))
    # A mix trains at its slowest node's pace (in sync: every worker waits for it).
    # The check measured the model's board workload; another batch keeps the study's
    # ratio to it (``study.rate``) and is taken to be off by the same pace.
    return rate * dilated * pace_of(paces, cell.model, dilated) * \
        min(node.cpu_cores_for(cell.model) for node in nodes) / \
        calibrated.cpu_cores_for(cell.model)


def cell_s(study: Study, cell: CellConfig, rate: float, val_samples: int) -> float:
    processes = 1 if cell.devices == 1 else cell.devices + 2
    cores = max(1, len(os.sched_getaffinity(0)))
    startup = STARTUP_S + processes * PROCESS_CPU_S / cores
    if cell.model == "resnet":
        startup += RESNET_SETUP_S * cell.devices
    if study.expected_oom(cell):
        return startup + OOM_S  # its first steps fill the node's memory
    validate = cell.epochs * val_samples / (3 * rate)
    return startup + train_s(study, cell, rate) + validate


def train_s(study: Study, cell: CellConfig, rate: float) -> float:
    """The cell's estimated training seconds (every epoch) at the one-device ``rate``."""
    train = cell.epochs * (cell.max_samples or 0) * study.device_factor(cell) / rate
    if cell.model == "resnet":
        steps = cell.epochs * (cell.max_samples or 0) / (cell.devices * cell.batch)
        train += FIRST_STEP_STEPS * train / max(1.0, steps)
    return train


def grid_s(study: Study, cells: list[CellConfig], speed: str, profile: str | None,
           catalog: Catalog, val_samples: int, speedup: float = 1.0,
           paces: Paces | None = None) -> float:
    """The whole grid's estimated time, seconds, on nodes of ``speed`` (``node_rate``)."""
    return sum(cell_s(study, c, node_rate(study, c, speed, profile, catalog, speedup,
                                          paces), val_samples) for c in cells)


def shown(seconds: float) -> str:
    """``2 h 05 min``, ``14 min``, ``40 s``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    if minutes < 120:
        return f"{minutes} min"
    days, rest = divmod(minutes, 24 * 60)
    hours, minutes = divmod(rest, 60)
    return (f"{days} d " if days else "") + f"{hours} h {minutes:02d} min"
