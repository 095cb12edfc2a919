"""One attempt of a cell as data: what it is asked (``CellRequest``) and the context its
steps pass along (``CellRun``).

The cell runner (``sweep.runner``) is four steps over one ``CellRun``: launch
(``sweep.launch``: place the cell on nodes, start its processes, stop them all),
wait (``sweep.wait``: poll until the decisive processes ended), judge
(``sweep.judge``: the status and its reason) and record (``sweep.record``: the result
row). ``place`` (in ``sweep.launch``) builds the ``CellRun``, so every field a later
step reads is already set; only the monitor is optional (``--interval 0``).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..cell import CellConfig
from ..cluster.base import Cluster, Node
from ..engines.base import Engine, ProcessSpec, TrainOptions
from .interrupts import StopRequest
from .monitoring import CellMonitor
from .stragglers import Straggler
from .thrashing import ThrashWatch


@dataclass(frozen=True)
class CellRequest:
    """What one attempt of a cell is asked to do (``runner.run_cell``'s arguments).

    ``cell_dir`` is this attempt's own folder (``cells/<cell_id>/attempt-<N>``).
    ``on_epoch(epochs_done)`` is called about every second while the cell trains.
    ``max_speedup``: the most time dilation the cluster may give the cell (emulated).
    ``traffic_file``: the live shipper's traffic log, taken out of the loopback counters.
    """

    cell: CellConfig
    cell_dir: Path
    cluster: Cluster
    engine: Engine
    options: TrainOptions
    sweep_id: str
    attempt: int = 1
    timeout_s: float | None = None
    monitor_interval_s: float | None = 1.0
    on_epoch: Callable[[int], None] | None = None
    stop: StopRequest = field(default_factory=StopRequest)
    traffic_file: Path | None = None
    max_speedup: float = 1.0


@dataclass
class Launched:
    """A process of the cell, started; ``returncode`` once it is seen ended."""

    spec: ProcessSpec
    proc: subprocess.Popen
    returncode: int | None = None


@dataclass
class Ending:
    """How the cell's processes ended, as the wait (or a failure to start) saw it.

    ``outcome``: ``ok``, ``error``, ``timeout``, ``interrupted`` or ``thrashing``;
    ``culprit``: for ``error``, the process seen failing first; ``error``: what raised
    while the processes started or ran (``Type: message``), if anything did.
    """

    outcome: str = "failed"
    culprit: Launched | None = None
    error: str = ""


@dataclass
class CellRun:
    """The context the runner's steps pass along: the request, the nodes the cell got,
    the clocks of its launch, what it started, and how it ended."""

    req: CellRequest
    nodes: list[Node]
    speedup: float  # the time dilation the cluster gave the cell (emulated; else 1)
    offsets_s: dict[str, float]  # each node's clock minus this host's, at the launch
    t_launch: float  # wall clock (s since the epoch)
    t_launch_mono: float  # time.monotonic() at the same moment
    thrash_watch: ThrashWatch
    straggler: Straggler
    specs: list[ProcessSpec] = field(default_factory=list)
    launched: list[Launched] = field(default_factory=list)
    oom_before: dict[str, int] = field(default_factory=dict)  # node -> kills at launch
    monitor: CellMonitor | None = None
    ending: Ending = field(default_factory=Ending)
    t_reaped: float = 0.0  # wall clock once every process was reaped
    fetch_problems: list[str] = field(default_factory=list)  # nodes not fetched from
