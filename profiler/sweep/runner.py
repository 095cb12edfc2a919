"""The life of one cell: place its roles, start them, watch them, reap them, judge them.

Every process of a cell starts in its own process group; whatever happens (success, a
worker failing, a timeout, a stop signal, an error while starting) every group is killed
and every process reaped before ``run_cell`` returns or raises. A failing worker stops
the cell at once: in ``dist_sync`` the other workers would otherwise wait for it forever.

The steps are modules of their own, over one context (``sweep.cell_run.CellRun``):
``sweep.launch`` (place, launch, release), ``sweep.wait``, ``sweep.judge`` and
``sweep.record``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..cell import CellConfig
from ..cluster.base import Cluster
from ..engines.base import Engine, TrainOptions
from .cell_run import CellRequest, Ending
from .events import read_cell_events
from .judge import judge
from .launch import launch, place, release
from .record import build_record
from .wait import wait


def run_cell(cell: CellConfig, cluster: Cluster, engine: Engine, cell_dir: Path,
             options: TrainOptions, **settings: Any) -> dict:
    """``run_attempt`` of ``CellRequest(cell, cell_dir, cluster, engine, options,
    **settings)``: ``sweep_id`` and the request's optional fields by keyword."""
    return run_attempt(CellRequest(cell, cell_dir, cluster, engine, options, **settings))


def run_attempt(req: CellRequest) -> dict:
    """Run one attempt of a cell to its end and return its result record (not yet stored).

    Its events and logs (in ``req.cell_dir``) are never mixed with an earlier attempt's.
    Whatever goes wrong while the cell's processes start or run (an ``OSError`` from the
    cluster, a missing engine build) becomes the record's ``failed`` status and reason;
    only a cluster too small for the cell raises. ``req.stop`` (a signal) ends the cell
    as ``failed (interrupted)``. The record's ``speedup`` says what time dilation the
    cell got (its times are the board's / speedup).
    """
    run = place(req)
    try:
        launch(run)
        run.ending = wait(run)
    except Exception as exc:  # noqa: BLE001 - any failure is this cell's, not the sweep's
        run.ending = Ending("error", error=f"{type(exc).__name__}: {exc}")
    finally:
        release(run)
    run.t_reaped = time.time()
    # Nodes with disks of their own hand back what the cell wrote there, and the
    # cluster releases what it made for the cell: a launcher's node entries too, when
    # the cell failed while they were being made (nothing launched yet).
    entered = any(spec.launches_on for spec in run.specs)
    run.fetch_problems = (req.cluster.collect(req.cell_dir, run.nodes)
                          if run.launched or entered else [])
    events = read_cell_events(req.cell_dir / "events")
    status, reason = judge(run, events)
    return build_record(run, events, status, reason)
