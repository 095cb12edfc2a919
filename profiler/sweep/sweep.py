"""A sweep: run every cell of a grid in turn, keep every result, resume where it stopped.

``run_sweep`` is what both ``edgeprof sweep`` and ``edgeprof run`` (a sweep of one cell)
end in, with the same ``SweepSettings``. Results are appended as soon as a cell ends;
an interrupted cell is recorded as ``failed`` (reason ``interrupted``) and rerun by
``--resume``.
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

from ..cluster import open_cluster, teardown
from ..engines import get_engine
from ..engines.base import TrainOptions
from ..errors import ConfigError
from .grid import CellConfig
from .monitoring import summary_columns
from .runner import run_cell
from .store import ResultsStore

log = logging.getLogger(__name__)


@dataclass
class SweepSettings:
    cells: list[CellConfig]
    out_dir: Path | None = None  # default: runs/<sweep_id>
    cluster: str = "local"
    profile: str | None = None  # emulated cluster profile; None: what is up, else pi3b
    data_dir: Path | None = None
    timeout_s: float | None = None  # per cell
    resume: bool = False
    interval_s: float | None = 1.0  # metrics sampling; None disables the agent
    threads_per_process: int = 1
    seed: int = 42
    val_samples: int | None = None
    ship_target: object | None = None  # profiler.agent.options target, or None
    extra: dict = field(default_factory=dict)


@dataclass
class SweepOutcome:
    sweep_id: str
    sweep_dir: Path
    records: list[dict]  # this run's records, in grid order (skipped cells included)
    skipped: int = 0


def new_sweep_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S")


def prepare_sweep_dir(settings: SweepSettings) -> tuple[str, Path]:
    """Create (or, with ``resume``, reopen) the sweep folder; check it is writable."""
    out = settings.out_dir
    if settings.resume:
        if out is None or not (Path(out) / "sweep.json").exists():
            raise ConfigError("--resume needs --out DIR of an earlier sweep (with sweep.json)")
        sweep_id = json.loads((Path(out) / "sweep.json").read_text())["sweep_id"]
        _check_writable(Path(out))
        return sweep_id, Path(out)
    sweep_id = new_sweep_id()
    out = Path(out) if out is not None else Path("runs") / sweep_id
    if (out / "results.jsonl").exists():
        raise ConfigError(f"--out {out} already holds a sweep: add --resume to continue it, "
                          "or choose another --out")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--out {out} cannot be created ({exc.strerror}): "
                          "choose a writable folder") from None
    _check_writable(out)
    meta = {"sweep_id": sweep_id, "created": time.time(), "cluster": settings.cluster,
            "profile": settings.profile, "data_dir": str(settings.data_dir or ""),
            "timeout_s": settings.timeout_s, "interval_s": settings.interval_s,
            "cells": [asdict(c) for c in settings.cells]}
    (out / "sweep.json").write_text(json.dumps(meta, indent=1, sort_keys=True))
    return sweep_id, out


def run_sweep(settings: SweepSettings, *, progress: bool = True,
              on_record: Callable[[dict], None] | None = None) -> SweepOutcome:
    """Run every cell not yet finished; return this run's records."""
    if not settings.cells:
        raise ConfigError("the grid is empty: give at least one value for each option")
    sweep_id, sweep_dir = prepare_sweep_dir(settings)
    engines = {name: get_engine(name) for name in sorted({c.engine for c in settings.cells})}
    nodes_needed = max(engines[c.engine].nodes_needed(c) for c in settings.cells)
    extra_columns = summary_columns() if settings.interval_s else []
    store = ResultsStore(sweep_dir, extra_columns)
    done = store.finished_ids() if settings.resume else set()
    previous = store.latest()
    options = TrainOptions(data_dir=settings.data_dir,
                           threads_per_process=settings.threads_per_process,
                           seed=settings.seed, val_samples=settings.val_samples)

    cluster, created = open_cluster(settings.cluster, nodes_needed, settings.profile)
    shipper = _start_shipper(sweep_dir, settings.ship_target)
    records: list[dict] = []
    bar = tqdm(total=len(settings.cells), unit="cell", disable=not progress)
    try:
        for cell in settings.cells:
            if cell.cell_id in done:
                records.append(previous[cell.cell_id])
                bar.update(1)
                continue
            bar.set_description(cell.label)
            bar.set_postfix_str(f"epoch 0/{cell.epochs}")

            def on_epoch(done: int, epochs=cell.epochs) -> None:
                bar.set_postfix_str(f"epoch {done}/{epochs}")

            record = _run_one(cell, cluster, engines[cell.engine], sweep_dir, options,
                              sweep_id, settings, store, on_epoch)
            records.append(record)
            if on_record:
                on_record(record)
            bar.set_postfix_str(f"last: {record['status']}")
            bar.update(1)
    finally:
        bar.close()
        if shipper is not None:
            shipper.stop()
        cluster.close()
        if created:
            teardown(settings.cluster)
    return SweepOutcome(sweep_id, sweep_dir, records, skipped=len(done))


def _run_one(cell, cluster, engine, sweep_dir, options, sweep_id, settings, store,
             on_epoch) -> dict:
    cell_dir = sweep_dir / "cells" / cell.cell_id
    try:
        record = run_cell(cell, cluster, engine, cell_dir, options, sweep_id=sweep_id,
                          timeout_s=settings.timeout_s, monitor_interval_s=settings.interval_s,
                          on_epoch=on_epoch)
    except KeyboardInterrupt:
        store.append({**asdict(cell), "cell_id": cell.cell_id, "sweep_id": sweep_id,
                      "cluster": cluster.name, "status": "failed",
                      "reason": "interrupted (Ctrl-C); --resume runs it again"})
        raise
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
