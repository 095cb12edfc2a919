"""A sweep: run every cell of a grid in turn, keep every result, resume where it stopped.

``run_sweep`` is what both ``edgeprof sweep`` and ``edgeprof run`` (a sweep of one cell)
end in, with the same ``SweepSettings``. Results are appended as soon as a cell ends;
an interrupted cell is recorded as ``failed`` (reason ``interrupted``) and rerun by
``--resume``. Each run of a cell is an *attempt* with a folder of its own
(``cells/<cell_id>/attempt-<N>/``): a rerun never reads the events of an earlier one,
whose logs stay for diagnosis. The sweep folder and what ``--resume`` compares are
``sweep.folder``'s; the nodes are the provider's (``SweepSettings.cluster``, one of
``profiler.cluster.PROVIDERS``), opened for the sweep and taken down after it if the
sweep brought them up.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from tqdm import tqdm

from ..agent.shipping import TRAFFIC_FILE
from ..cell import CELL_FORMAT, CellConfig
from ..cluster import ClusterSettings, cluster_settings
from ..cluster.base import Cluster
from ..cluster.prices import PriceSpec
from ..engines import cell_label, get_engine
from ..engines.base import Engine, TrainOptions
from ..errors import ConfigError
from ..inputs import UserFile, stage
from ..status import Status
from .cell_run import CellRequest
from .cost import cost_columns
from .folder import next_attempt, prepare_sweep_dir
from .interrupts import StopRequest
from .needs import grid_needs
from .runner import run_attempt
from .store import ResultsStore
from .timeouts import cell_timeout_s
from .train_points import spool_cell_points

if TYPE_CHECKING:
    from ..agent.shipping.ship import LiveShipper

log = logging.getLogger(__name__)


@dataclass
class SweepSettings:
    cells: list[CellConfig]
    out_dir: Path | None = None  # default: runs/<sweep_id>
    # The node provider and its own settings (profile, speedup, inventory, ...).
    cluster: ClusterSettings = field(default_factory=lambda: cluster_settings("local"))
    data_dir: Path | None = None
    timeout_s: float | None = None  # per cell; None: derived from the cell, 0: none
    resume: bool = False
    interval_s: float | None = 1.0  # metrics sampling; None disables the agent
    threads_per_process: int = 1
    seed: int = 42
    val_samples: int | None = None
    ship_target: object | None = None  # profiler.agent.shipping.targets target, or None
    breakdown: bool = True  # workers time each step's phases (profiler.timeline)
    extra: dict = field(default_factory=dict)  # kept in sweep.json (e.g. the study's scale)
    # The user's files the cells need on their nodes (a model file, a dataset, a script),
    # staged into <sweep>/inputs before the first cell (profiler.inputs).
    user_files: tuple[UserFile, ...] = ()
    # What each node costs per hour (``--price``, profiler.cluster.prices): the cells'
    # cost columns (profiler.sweep.cost); None: no cost columns.
    price: PriceSpec | None = None
    # Whether a cell may still start: None, or why not (a study's ``--budget`` spent:
    # study/plan.py). A cell it holds back is not run and not recorded; ``--resume``
    # runs it later. Not part of the identity: it decides when, not what.
    may_start: Callable[[CellConfig], str | None] | None = None

    def identity(self) -> dict:
        """What else, besides each cell's configuration, decides a cell's results.

        Kept in ``sweep.json``; ``--resume`` refuses settings that differ, since a
        resumed sweep would otherwise mix results of two different setups. The
        provider's part is ``cluster`` and its options declared part of the identity
        (``ProviderOption.identity``); a key one side lacks is not compared, so sweeps
        written before providers were plugins still resume.
        """
        return {"cell_format": CELL_FORMAT, **self.cluster.identity(),
                "data_dir": str(self.data_dir) if self.data_dir else None,
                "threads": self.threads_per_process, "seed": self.seed,
                "val_samples": self.val_samples}


@dataclass
class SweepOutcome:
    sweep_id: str
    sweep_dir: Path
    records: list[dict]  # this run's records, in grid order (skipped cells included)
    skipped: int = 0
    # Cells ``SweepSettings.may_start`` held back, and the first reason it gave.
    held_back: int = 0
    held_reason: str = ""


def run_sweep(settings: SweepSettings, *, progress: bool = True,
              on_record: Callable[[dict], None] | None = None,
              on_start: Callable[[Path], None] | None = None) -> SweepOutcome:
    """Run every cell not yet finished; return this run's records.

    ``on_start(sweep_dir)`` is called once the sweep folder and the cluster are ready,
    before the first cell; ``on_record(record)`` after each cell.

    SIGINT, SIGTERM and SIGHUP stop the sweep (when it runs in the main thread): the
    running cell is reaped and recorded as ``failed (interrupted)``, and
    ``SweepInterrupted`` (a ``KeyboardInterrupt``) is raised once everything is stopped.
    """
    if not settings.cells:
        raise ConfigError("the grid is empty: give at least one value for each option")
    with StopRequest() as stop:
        return _run_sweep(settings, stop, progress, on_record, on_start)


def _run_sweep(settings: SweepSettings, stop: StopRequest, progress: bool,
               on_record: Callable[[dict], None] | None,
               on_start: Callable[[Path], None] | None) -> SweepOutcome:
    engines = {name: get_engine(name) for name in sorted({c.engine for c in settings.cells})}
    with settings.cluster.open(grid_needs(settings.cells,
                                           settings.interval_s is not None)) as cluster:
        # Before the sweep folder is made: a refused cell leaves no sweep behind.
        _check_nodes(settings.cells, engines, cluster)
        sweep_id, sweep_dir = prepare_sweep_dir(settings)
        # The agents' columns are in the table of a sweep that runs them.
        store = ResultsStore(sweep_dir, monitored=bool(settings.interval_s))
        done = store.finished_ids() if settings.resume else set()
        previous = store.latest()
        inputs_dir = stage(settings.user_files, sweep_dir) if settings.user_files else None
        options = TrainOptions(data_dir=settings.data_dir,
                               threads_per_process=settings.threads_per_process,
                               seed=settings.seed, val_samples=settings.val_samples,
                               breakdown=settings.breakdown, inputs_dir=inputs_dir)
        if on_start is not None:
            on_start(sweep_dir)
        run = SweepRun(settings, cluster, engines, sweep_id, sweep_dir, options, store,
                       done, previous, stop, progress=progress, on_record=on_record)
        records = _run_cells(run)
    # The grid's cells found done; the folder may hold others (a resume with a smaller grid).
    skipped = sum(cell.cell_id in done for cell in settings.cells)
    return SweepOutcome(sweep_id, sweep_dir, records, skipped=skipped,
                        held_back=run.held_back, held_reason=run.held_reason)


def _check_nodes(cells: list[CellConfig], engines: dict[str, Engine], cluster: Cluster) -> None:
    """Each cell against the nodes it will be placed on (``Engine.check_nodes``: a
    network bigger than a node's memory), once the cluster is open and before the first
    cell runs: a bad cell ends the sweep in one line (exit 2), not as a failed cell."""
    nodes = cluster.nodes()
    for cell in cells:
        engine = engines[cell.engine]
        needed = engine.nodes_needed(cell)
        if len(nodes) >= needed:  # fewer: the cell's placement says so
            engine.check_nodes(cell, nodes[:needed])


@dataclass
class SweepRun:
    """What the cells of one run of a sweep share: the context of its loop."""

    settings: SweepSettings
    cluster: Cluster  # opened for the sweep
    engines: dict[str, Engine]  # by name, the grid's
    sweep_id: str
    sweep_dir: Path
    options: TrainOptions
    store: ResultsStore
    done: set[str]  # the cells finished by an earlier run (--resume)
    previous: dict[str, dict]  # their records, by cell id
    stop: StopRequest
    progress: bool = True  # the progress bar
    on_record: Callable[[dict], None] | None = None
    shipper: LiveShipper | None = None  # --influx-*: started by _run_cells
    held_back: int = 0  # cells SweepSettings.may_start did not let start
    held_reason: str = ""


def _run_cells(run: SweepRun) -> list[dict]:
    """Every cell in grid order on ``run.cluster``: the finished ones' records as they
    are, the others run; the live shipper (``--influx-*``) runs beside them."""
    records: list[dict] = []
    bar = tqdm(total=len(run.settings.cells), unit="cell", disable=not run.progress)
    try:
        run.shipper = _start_shipper(run.sweep_dir, run.settings.ship_target)
        if run.shipper is not None and run.settings.resume:
            # What an earlier run left undelivered (killed, or its server down): its
            # cells are never watched again, so without this only `edgeprof ship` would.
            run.shipper.finish(run.sweep_dir / "cells")
        for cell in run.settings.cells:
            run.stop.raise_if_requested()
            if cell.cell_id in run.done:
                records.append(run.previous[cell.cell_id])
                bar.update(1)
                continue
            why = run.settings.may_start(cell) if run.settings.may_start else None
            if why:
                run.held_back += 1
                run.held_reason = run.held_reason or why
                bar.update(1)
                continue
            bar.set_description(cell_label(cell))
            bar.set_postfix_str(f"epoch 0/{cell.epochs}")

            def on_epoch(done: int, epochs: int = cell.epochs) -> None:
                bar.set_postfix_str(f"epoch {done}/{epochs}")

            record = _run_one(run, cell, on_epoch)
            records.append(record)
            if run.on_record:
                run.on_record(record)
            bar.set_postfix_str(f"last: {record['status']}")
            bar.update(1)
        run.stop.raise_if_requested()
    finally:
        bar.close()
        if run.shipper is not None:
            # A stopped sweep must exit promptly; what is not delivered stays in the
            # spools for `edgeprof ship`.
            run.shipper.stop(timeout_s=SHIPPER_STOP_S_INTERRUPTED if run.stop.requested
                             else SHIPPER_STOP_S)
    return records


SHIPPER_STOP_S = 30.0
SHIPPER_STOP_S_INTERRUPTED = 3.0


def _run_one(run: SweepRun, cell: CellConfig, on_epoch: Callable[[int], None]) -> dict:
    """Run one attempt of ``cell`` and store its record, whatever happens to it."""
    settings, engine = run.settings, run.engines[cell.engine]
    attempt = next_attempt(run.sweep_dir / "cells" / cell.cell_id)
    cell_dir = run.sweep_dir / "cells" / cell.cell_id / f"attempt-{attempt}"
    if run.shipper is not None:
        run.shipper.watch(cell_dir)
    record = None
    try:
        record = run_attempt(CellRequest(
            cell, cell_dir, run.cluster, engine, run.options, run.sweep_id, attempt=attempt,
            timeout_s=cell_timeout_s(cell, settings.timeout_s, settings.val_samples),
            monitor_interval_s=settings.interval_s, on_epoch=on_epoch, stop=run.stop,
            traffic_file=run.sweep_dir / TRAFFIC_FILE,
            max_speedup=settings.cluster.max_speedup))
    except Exception as exc:  # noqa: BLE001 - one cell's failure must not end the sweep
        log.warning("cell %s failed outside its processes: %s", cell_label(cell), exc)
        record = {**cell.fields_record(), "cell_id": cell.cell_id, "sweep_id": run.sweep_id,
                  "cluster": run.cluster.name, "attempt": attempt, "status": Status.FAILED,
                  "reason": f"could not run the cell: {type(exc).__name__}: {exc}"[:500]}
    finally:
        if record is not None and settings.price is not None:
            # The nodes the cell ran on, as the runner placed them: the first it needs.
            record.update(cost_columns(record, settings.price,
                                       run.cluster.nodes()[:engine.nodes_needed(cell)]))
        if record is not None:
            try:
                # Progress and outcome as points for Grafana, shipped with the cell's spools.
                spool_cell_points(cell_dir, cell, record, run.sweep_id)
            except OSError as exc:
                log.warning("cell %s: training points not spooled: %s", cell_label(cell), exc)
        if run.shipper is not None:
            run.shipper.finish(cell_dir)
    run.store.append(record)
    return record


def _start_shipper(sweep_dir: Path, target: object | None) -> LiveShipper | None:
    if target is None:
        return None
    from ..agent.shipping.ship import LiveShipper
    shipper = LiveShipper(sweep_dir, target)
    shipper.start()
    return shipper
