"""What an engine is: it turns a cell into the processes (roles) to start on nodes.

The cell runner (``profiler.sweep.runner``) starts each ``ProcessSpec`` through the
cluster, watches them, and reaps them; engines only plan. Every process runs
``workloads.train`` (or the engine's own launcher around it) and workers write their
JSON-lines events into the cell's ``events/`` folder.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ..cluster.base import Node
from ..cell import CellConfig


@dataclass(frozen=True)
class ProcessSpec:
    """One process of a cell: its role, where it runs and what it runs."""

    role: str  # scheduler | server | worker | launcher
    rank: int
    node: Node
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    # Workers decide the cell's outcome; scheduler/servers are stopped once workers end.
    decisive: bool = True

    @property
    def name(self) -> str:
        return f"{self.role}-{self.rank}"


@dataclass(frozen=True)
class TrainOptions:
    """Per-sweep settings every worker gets besides its cell."""

    data_dir: Path | None = None
    threads_per_process: int = 1
    seed: int = 42
    val_samples: int | None = None


class Engine(Protocol):
    name: str

    def nodes_needed(self, cell: CellConfig) -> int:
        """How many nodes the cell occupies (e.g. devices + 1 with a master node)."""

    def plan(self, cell: CellConfig, nodes: list[Node], cell_dir: Path,
             options: TrainOptions) -> list[ProcessSpec]:
        """The processes to start for ``cell`` on ``nodes`` (``nodes_needed`` of them,
        checked by the cell runner)."""


def train_argv(cell: CellConfig, cell_dir: Path, options: TrainOptions,
               kvstore: str) -> list[str]:
    """The ``workloads.train`` command line for one worker of ``cell``."""
    argv = [sys.executable, "-m", "workloads.train",
            "--model", cell.model, "--batch", str(cell.batch), "--epochs", str(cell.epochs),
            "--lr", repr(cell.lr), "--momentum", repr(cell.momentum), "--wd", repr(cell.wd),
            "--lr-scaling", cell.lr_scaling, "--dataset", cell.dataset, "--kvstore", kvstore,
            "--events-dir", str(cell_dir / "events"),
            "--threads", str(options.threads_per_process), "--seed", str(options.seed)]
    if cell.layers is not None:
        argv += ["--layers", str(cell.layers)]
    if cell.max_samples is not None:
        argv += ["--max-samples", str(cell.max_samples)]
    if options.data_dir is not None:
        argv += ["--data-dir", str(options.data_dir)]
    if options.val_samples is not None:
        argv += ["--val-samples", str(options.val_samples)]
    return argv
