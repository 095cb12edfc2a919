"""The life of one cell: place its roles, start them, watch them, reap them, judge them.

Every process of a cell starts in its own process group; whatever happens (success, a
worker failing, a timeout, Ctrl-C) every group is killed and every process reaped before
``run_cell`` returns or raises. A failing worker stops the cell at once: in ``dist_sync``
the other workers would otherwise wait for it forever.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from ..cluster.base import Cluster, kill_group
from ..engines.base import Engine, ProcessSpec, TrainOptions
from ..errors import ClusterError
from .events import CellEvents, epochs_done, read_cell_events
from .grid import CellConfig
from .monitoring import CellMonitor

POLL_S = 0.05
PROGRESS_EVERY_S = 1.0  # how often a long cell reports its epochs to the progress bar
# Scheduler and servers exit by themselves once the workers finalize; past this grace
# they are killed (a server stuck in ps-lite's shutdown must not hold the sweep).
ROLE_EXIT_GRACE_S = 1.0
EXIT_OOM = 3  # workloads.train's exit status for out of memory
EXIT_DATA = 2


@dataclass
class Launched:
    spec: ProcessSpec
    proc: subprocess.Popen
    returncode: int | None = None


def run_cell(cell: CellConfig, cluster: Cluster, engine: Engine, cell_dir: Path,
             options: TrainOptions, *, sweep_id: str, timeout_s: float | None = None,
             monitor_interval_s: float | None = 1.0,
             on_epoch: Callable[[int], None] | None = None) -> dict:
    """Run one cell to its end and return its result record (not yet stored).

    ``on_epoch(epochs_done)`` is called about every second while the cell trains (cells
    of the study's size run for hours: the progress bar shows where they are).
    """
    cell_dir.mkdir(parents=True, exist_ok=True)
    (cell_dir / "cell.json").write_text(json.dumps(asdict(cell), indent=1, sort_keys=True))
    needed = engine.nodes_needed(cell)
    nodes = cluster.nodes()[:needed]
    if len(nodes) < needed:
        raise ClusterError(f"{cell.label} needs {needed} nodes, the {cluster.name} cluster "
                           f"has {len(nodes)}: bring up a larger cluster")
    specs = engine.plan(cell, nodes, cell_dir, options)
    oom_before = {n.name: cluster.oom_killed(n) for n in nodes}

    monitor = None
    if monitor_interval_s:
        monitor = CellMonitor(cluster, cell_dir, cell, sweep_id, monitor_interval_s)
        monitor.start(nodes)
    launched: list[Launched] = []
    t_launch = time.time()
    outcome = "failed"
    try:
        for spec in specs:
            proc = cluster.start(spec.node, spec.argv, spec.env,
                                 cell_dir / "logs" / f"{spec.name}.log")
            launched.append(Launched(spec, proc))
        if monitor:
            monitor.track(_pids_by_node(launched), nodes)
        outcome = _wait(launched, t_launch, timeout_s,
                        _epoch_reporter(cell_dir / "events", on_epoch))
    finally:
        _reap(launched)
        if monitor:
            monitor.stop()
    t_reaped = time.time()

    events = read_cell_events(cell_dir / "events")
    oom_kills = sum(cluster.oom_killed(n) - oom_before[n.name] for n in nodes)
    status, reason = _judge(outcome, launched, events, oom_kills, cell_dir, timeout_s)
    record = {**asdict(cell), "cell_id": cell.cell_id, "sweep_id": sweep_id,
              "cluster": cluster.name, "status": status, "reason": reason,
              "launched_at": t_launch, "reaped_at": t_reaped, **events.columns(t_launch)}
    if monitor and events.train_window():
        worker_nodes = sorted({l.spec.node.name for l in launched if l.spec.role == "worker"})
        try:
            record.update(monitor.summary(worker_nodes, *events.train_window()))
        except Exception as exc:  # a broken spool must not lose the training result
            record["reason"] = (reason + "; " if reason else "") + f"no metrics summary: {exc}"
    return record


def _wait(launched: list[Launched], t_launch: float, timeout_s: float | None,
          report: Callable[[], None]) -> str:
    """Poll until every decisive process ended; ``ok``, ``error`` or ``timeout``."""
    decisive = [l for l in launched if l.spec.decisive]
    next_report_s = time.monotonic() + PROGRESS_EVERY_S
    while True:
        if time.monotonic() >= next_report_s:
            report()
            next_report_s += PROGRESS_EVERY_S
        for l in launched:
            if l.returncode is None:
                l.returncode = l.proc.poll()
        if any(l.returncode not in (None, 0) for l in decisive):
            return "error"
        if all(l.returncode is not None for l in decisive):
            # Servers that die early are fine only if every worker finished.
            return "ok"
        if any(l.returncode not in (None, 0) for l in launched if not l.spec.decisive):
            return "error"  # a dead scheduler/server leaves workers waiting forever
        if timeout_s is not None and time.time() - t_launch > timeout_s:
            return "timeout"
        time.sleep(POLL_S)


def _epoch_reporter(events_dir: Path, on_epoch: Callable[[int], None] | None
                    ) -> Callable[[], None]:
    """A callable that tells ``on_epoch`` how many epochs rank 0 has finished, on change."""
    last = [0]

    def report() -> None:
        if on_epoch is None:
            return
        done = epochs_done(events_dir)
        if done != last[0]:
            last[0] = done
            on_epoch(done)
    return report


def _reap(launched: list[Launched]) -> None:
    """Let helper roles exit by themselves for a moment, then kill every group."""
    deadline = time.time() + ROLE_EXIT_GRACE_S
    for l in launched:
        if l.returncode is None:
            try:
                l.returncode = l.proc.wait(timeout=max(0.0, deadline - time.time()))
            except subprocess.TimeoutExpired:
                pass
    for l in launched:
        code = kill_group(l.proc, grace_s=1.0)
        if l.returncode is None:
            l.returncode = code


def _judge(outcome: str, launched: list[Launched], events: CellEvents, oom_kills: int,
           cell_dir: Path, timeout_s: float | None) -> tuple[str, str]:
    if outcome == "timeout":
        return "timeout", f"no result within --timeout {timeout_s:g} s"
    failed = [l for l in launched if l.returncode not in (0, None)
              and (l.spec.decisive or outcome == "error")]
    oom_event = events.error_of_kind("oom")
    if oom_kills or oom_event or any(l.returncode == EXIT_OOM for l in failed):
        where = oom_event or (f"{oom_kills} process(es) killed by the node memory limit"
                              if oom_kills else "out of memory")
        return "oom", where
    if outcome == "ok" and events.complete():
        return "ok", ""
    if outcome == "ok":
        return "failed", "workers exited without an end event"
    first = min((l for l in failed if l.spec.decisive), default=None,
                key=lambda l: l.spec.rank) or (failed[0] if failed else None)
    if first is None:
        return "failed", "unknown failure"
    return "failed", f"{first.spec.name} exited {first.returncode}: " + _last_line(
        cell_dir / "logs" / f"{first.spec.name}.log")


def _last_line(log: Path, limit: int = 200) -> str:
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no log)"
    return (lines[-1] if lines else "(empty log)")[:limit]


def _pids_by_node(launched: list[Launched]) -> dict[str, dict[str, list[int]]]:
    out: dict[str, dict[str, list[int]]] = {}
    for l in launched:
        out.setdefault(l.spec.node.name, {}).setdefault(l.spec.role, []).append(l.proc.pid)
    return out
