"""A sweep: run every cell of a grid in turn, keep every result, resume where it stopped.

``run_sweep`` is what both ``edgeprof sweep`` and ``edgeprof run`` (a sweep of one cell)
end in, with the same ``SweepSettings``. Results are appended as soon as a cell ends;
an interrupted cell is recorded as ``failed`` (reason ``interrupted``) and rerun by
``--resume``. Each run of a cell is an *attempt* with a folder of its own
(``cells/<cell_id>/attempt-<N>/``): a rerun never reads the events of an earlier one,
whose logs stay for diagnosis.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from tqdm import tqdm

from ..agent.ship import TRAFFIC_FILE
from ..cell import CELL_FORMAT, CellConfig
from ..cluster import open_cluster, teardown
from ..engines import ENGINES, distributions, get_engine
from ..engines.base import TrainOptions
from ..errors import ConfigError
from ..fsutil import atomic_write_text
from .interrupts import StopRequest
from .monitoring import summary_columns
from .train_points import spool_cell_points
from .runner import run_cell
from .store import ResultsStore
from .timeouts import cell_timeout_s

log = logging.getLogger(__name__)


@dataclass
class SweepSettings:
    cells: list[CellConfig]
    out_dir: Path | None = None  # default: runs/<sweep_id>
    cluster: str = "local"
    profile: str | None = None  # emulated cluster profile; None: what is up, else pi3b
    data_dir: Path | None = None
    timeout_s: float | None = None  # per cell; None: derived from the cell, 0: none
    resume: bool = False
    interval_s: float | None = 1.0  # metrics sampling; None disables the agent
    threads_per_process: int = 1
    seed: int = 42
    val_samples: int | None = None
    ship_target: object | None = None  # profiler.agent.options target, or None
    inventory: Path | None = None  # the Ansible inventory of --cluster inventory
    speedup: float = 1.0  # emulated cluster: the most time dilation a cell may get
    breakdown: bool = True  # workers time each step's phases (profiler.timeline)
    extra: dict = field(default_factory=dict)  # kept in sweep.json (e.g. the study's scale)

    def identity(self) -> dict:
        """What else, besides each cell's configuration, decides a cell's results.

        Kept in ``sweep.json``; ``--resume`` refuses settings that differ, since a
        resumed sweep would otherwise mix results of two different setups.
        """
        return {"cell_format": CELL_FORMAT, "cluster": self.cluster, "profile": self.profile,
                "data_dir": str(self.data_dir) if self.data_dir else None,
                "threads": self.threads_per_process, "seed": self.seed,
                "val_samples": self.val_samples,
                "inventory": str(self.inventory) if self.inventory else None,
                "speedup": self.speedup}


@dataclass
class SweepOutcome:
    sweep_id: str
    sweep_dir: Path
    records: list[dict]  # this run's records, in grid order (skipped cells included)
    skipped: int = 0


def new_sweep_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S")


def check_sweep_dir(settings: SweepSettings) -> dict | None:
    """Refuse an ``--out`` (and ``--resume``) that cannot work, writing nothing.

    Returns the earlier sweep's ``sweep.json`` when resuming, else None. The CLI calls it
    before it prints anything; ``prepare_sweep_dir`` calls it again (the Python API).
    """
    out = settings.out_dir
    if settings.resume:
        if out is None or not (Path(out) / "sweep.json").is_file():
            where = "" if out is None else f" ({out} has no sweep.json)"
            raise ConfigError(f"--resume needs --out DIR of an earlier sweep{where}: give "
                              "the folder that sweep wrote, e.g. --out runs/<sweep_id>")
        meta = read_sweep_meta(Path(out))
        check_resume(meta, settings)
        return meta
    if out is not None:
        out = Path(out)
        if (out / "results.jsonl").exists():
            raise ConfigError(f"--out {out} already holds a sweep: add --resume to continue "
                              "it, or choose another --out")
        existing = next((p for p in (out, *out.parents) if p.exists()), None)
        if existing is not None and not existing.is_dir():
            raise ConfigError(f"--out {out} cannot be created ({existing} is a file): "
                              "choose another --out")
    return None


def prepare_sweep_dir(settings: SweepSettings) -> tuple[str, Path]:
    """Create (or, with ``resume``, reopen and check) the sweep folder; check it is writable."""
    meta = check_sweep_dir(settings)
    if meta is not None:
        _check_writable(Path(settings.out_dir))
        return meta["sweep_id"], Path(settings.out_dir)
    sweep_id = new_sweep_id()
    out = Path(settings.out_dir) if settings.out_dir is not None else Path("runs") / sweep_id
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--out {out} cannot be created ({exc.strerror}): "
                          "choose a writable folder") from None
    _check_writable(out)
    meta = {"sweep_id": sweep_id, "created": time.time(), "timeout_s": settings.timeout_s,
            "interval_s": settings.interval_s, "identity": settings.identity(),
            "cells": [asdict(c) for c in settings.cells], "versions": _versions(),
            **({"extra": settings.extra} if settings.extra else {})}
    atomic_write_text(out / "sweep.json", json.dumps(meta, indent=1, sort_keys=True))
    return sweep_id, out


def _versions() -> dict:
    """What ran the sweep, for its report (which may be written elsewhere, later).

    From package metadata, not ``import mxnet``: importing MXNet costs the controller
    seconds. Packages that are not installed are left out.
    """
    import platform
    from importlib import metadata

    from .. import __version__

    found = {"edgeprof": __version__, "python": platform.python_version()}
    for package in distributions(ENGINES):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    return found


def read_sweep_meta(sweep_dir: Path) -> dict:
    """``sweep.json`` of a sweep folder; ``ConfigError`` (one line) when it is unusable."""
    path = Path(sweep_dir) / "sweep.json"
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path} cannot be read ({exc.strerror}): check --out") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} is corrupt ({exc}): restore it, or start a new sweep "
                          "with another --out") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("sweep_id"), str):
        raise ConfigError(f"{path} has no sweep_id: it is not an edgeprof sweep; start a new "
                          "sweep with another --out")
    return meta


def check_resume(meta: dict, settings: SweepSettings) -> None:
    """Refuse to resume with settings that change what the cells measure."""
    recorded = meta.get("identity")
    if not isinstance(recorded, dict):
        # A sweep from before identities were kept: older than cell formats too (format 1),
        # so it is refused below like any sweep of another cell format.
        recorded = {}
    now = settings.identity()
    if recorded.get("cell_format") != now["cell_format"]:
        raise ConfigError(
            f"--resume: the sweep in {settings.out_dir} was written by another edgeprof "
            f"version (cell format {recorded.get('cell_format', 1)}, this one "
            f"{now['cell_format']}), whose cells this one cannot match: start a new sweep "
            "with another --out")
    if now["profile"] is None:
        now["profile"] = recorded.get("profile")  # no --profile: the sweep's own
    for key, value in now.items():
        if key in recorded and recorded[key] != value:
            option = RESUME_OPTIONS.get(key, key)
            raise ConfigError(
                f"--resume: {option} {_shown(value)} differs from the sweep's "
                f"{_shown(recorded[key])}: resume with {option} {_shown(recorded[key])}, "
                "or start a new sweep with another --out")


RESUME_OPTIONS = {"cluster": "--cluster", "profile": "--profile", "data_dir": "--data-dir",
                  "threads": "--threads", "seed": "seed", "val_samples": "--val-samples",
                  "inventory": "--inventory", "speedup": "--speedup"}


def _shown(value) -> str:
    return "(none)" if value is None else str(value)


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
    sweep_id, sweep_dir = prepare_sweep_dir(settings)
    engines = {name: get_engine(name) for name in sorted({c.engine for c in settings.cells})}
    nodes_needed = max(engines[c.engine].nodes_needed(c) for c in settings.cells)
    extra_columns = summary_columns() if settings.interval_s else []
    store = ResultsStore(sweep_dir, extra_columns)
    done = store.finished_ids() if settings.resume else set()
    previous = store.latest()
    options = TrainOptions(data_dir=settings.data_dir,
                           threads_per_process=settings.threads_per_process,
                           seed=settings.seed, val_samples=settings.val_samples,
                           breakdown=settings.breakdown)

    cluster, created = open_cluster(settings.cluster, nodes_needed, settings.profile,
                                    inventory=settings.inventory,
                                    cells=settings.cells)
    if on_start is not None:
        on_start(sweep_dir)
    shipper = None
    records: list[dict] = []
    bar = tqdm(total=len(settings.cells), unit="cell", disable=not progress)
    try:
        shipper = _start_shipper(sweep_dir, settings.ship_target)
        for cell in settings.cells:
            stop.raise_if_requested()
            if cell.cell_id in done:
                records.append(previous[cell.cell_id])
                bar.update(1)
                continue
            bar.set_description(cell.label)
            bar.set_postfix_str(f"epoch 0/{cell.epochs}")

            def on_epoch(done: int, epochs=cell.epochs) -> None:
                bar.set_postfix_str(f"epoch {done}/{epochs}")

            record = _run_one(cell, cluster, engines[cell.engine], sweep_dir, options,
                              sweep_id, settings, store, on_epoch, stop, shipper)
            records.append(record)
            if on_record:
                on_record(record)
            bar.set_postfix_str(f"last: {record['status']}")
            bar.update(1)
        stop.raise_if_requested()
    finally:
        bar.close()
        if shipper is not None:
            # A stopped sweep must exit promptly; what is not delivered stays in the
            # spools for `edgeprof ship`.
            shipper.stop(timeout_s=SHIPPER_STOP_S_INTERRUPTED if stop.requested
                         else SHIPPER_STOP_S)
        cluster.close()
        if created:
            teardown(settings.cluster)
    return SweepOutcome(sweep_id, sweep_dir, records, skipped=len(done))


SHIPPER_STOP_S = 30.0
SHIPPER_STOP_S_INTERRUPTED = 3.0


def next_attempt(cell_root: Path) -> int:
    """The number of the next attempt of a cell: one more than the last one started."""
    numbers = [int(path.parent.name.split("-", 1)[1])
               for path in cell_root.glob("attempt-*/cell.json")
               if path.parent.name.split("-", 1)[1].isdigit()]
    return max(numbers, default=0) + 1


def _run_one(cell, cluster, engine, sweep_dir, options, sweep_id, settings, store,
             on_epoch, stop, shipper) -> dict:
    """Run one attempt of ``cell`` and store its record, whatever happens to it."""
    attempt = next_attempt(sweep_dir / "cells" / cell.cell_id)
    cell_dir = sweep_dir / "cells" / cell.cell_id / f"attempt-{attempt}"
    timeout_s = cell_timeout_s(cell, settings.timeout_s, settings.val_samples)
    if shipper is not None:
        shipper.watch(cell_dir)
    record = None
    try:
        record = run_cell(cell, cluster, engine, cell_dir, options, sweep_id=sweep_id,
                          timeout_s=timeout_s, monitor_interval_s=settings.interval_s,
                          on_epoch=on_epoch, stop=stop, attempt=attempt,
                          traffic_file=sweep_dir / TRAFFIC_FILE,
                          max_speedup=settings.speedup)
    except Exception as exc:  # noqa: BLE001 - one cell's failure must not end the sweep
        log.warning("cell %s failed outside its processes: %s", cell.label, exc)
        record = {**asdict(cell), "cell_id": cell.cell_id, "sweep_id": sweep_id,
                  "cluster": cluster.name, "attempt": attempt, "status": "failed",
                  "reason": f"could not run the cell: {type(exc).__name__}: {exc}"[:500]}
    finally:
        if record is not None:
            try:
                # Progress and outcome as points for Grafana, shipped with the cell's spools.
                spool_cell_points(cell_dir, cell, record, sweep_id)
            except OSError as exc:
                log.warning("cell %s: training points not spooled: %s", cell.label, exc)
        if shipper is not None:
            shipper.finish(cell_dir)
    store.append(record)
    return record


def _start_shipper(sweep_dir: Path, target):
    if target is None:
        return None
    from ..agent.ship import LiveShipper
    shipper = LiveShipper(sweep_dir, target)
    shipper.start()
    return shipper


def _check_writable(path: Path) -> None:
    # os.access says yes to root everywhere; only a real write tells (read-only mounts).
    probe = path / f".write-test-{os.getpid()}"
    try:
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"--out {path} is not writable ({exc.strerror}): "
                          "choose a folder you can write to") from None
