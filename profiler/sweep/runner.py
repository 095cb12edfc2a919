"""The life of one cell: place its roles, start them, watch them, reap them, judge them.

Every process of a cell starts in its own process group; whatever happens (success, a
worker failing, a timeout, a stop signal, an error while starting) every group is killed
and every process reaped before ``run_cell`` returns or raises. A failing worker stops the cell at once: in ``dist_sync``
the other workers would otherwise wait for it forever.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from workloads.events import NODE_ENV

from ..cell import CellConfig
from ..cluster.base import Cluster, kill_groups
from ..engines.base import Engine, ProcessSpec, TrainOptions
from ..errors import ClusterError
from ..fsutil import atomic_write_text
from ..metrics.energy import cell_work
from ..timeline.record import breakdown_columns
from .events import CellEvents, epochs_done, read_cell_events
from .interrupts import StopRequest
from .monitoring import CellMonitor
from .stragglers import Straggler
from .thrashing import ThrashWatch

POLL_S = 0.05
PROGRESS_EVERY_S = 1.0  # how often a long cell reports its epochs to the progress bar
# Scheduler and servers exit by themselves once the workers finalize; past this grace
# they are killed (a server stuck in ps-lite's shutdown must not hold the sweep).
ROLE_EXIT_GRACE_S = 1.0
KILL_GRACE_S = 1.0  # SIGTERM to SIGKILL, shared by all of a cell's groups
EXIT_OOM = 3  # workloads.train's exit status for out of memory


@dataclass
class Launched:
    spec: ProcessSpec
    proc: subprocess.Popen
    returncode: int | None = None


def run_cell(cell: CellConfig, cluster: Cluster, engine: Engine, cell_dir: Path,
             options: TrainOptions, *, sweep_id: str, timeout_s: float | None = None,
             monitor_interval_s: float | None = 1.0,
             on_epoch: Callable[[int], None] | None = None,
             stop: StopRequest | None = None, attempt: int = 1,
             traffic_file: Path | None = None, max_speedup: float = 1.0) -> dict:
    """Run one attempt of a cell to its end and return its result record (not yet stored).

    ``cell_dir`` is this attempt's own folder (``cells/<cell_id>/attempt-<N>``): its
    events and logs are never mixed with an earlier attempt's. Whatever goes wrong while
    the cell's processes start or run (an ``OSError`` from the cluster, a missing engine
    build) becomes the record's ``failed`` status and reason; only a cluster too small for
    the cell raises. ``stop`` (a signal) ends the cell as ``failed (interrupted)``.
    ``on_epoch(epochs_done)`` is called about every second while the cell trains (cells
    of the study's size run for hours: the progress bar shows where they are).
    ``max_speedup``: the most time dilation the cluster may give the cell (emulated);
    the record's ``speedup`` says what it got (its times are the board's / speedup).
    """
    stop = stop if stop is not None else StopRequest()
    cell_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(cell_dir / "cell.json", json.dumps(
        {**asdict(cell), "cell_id": cell.cell_id, "attempt": attempt}, indent=1, sort_keys=True))
    needed = engine.nodes_needed(cell)
    # Per-cell node settings (the emulated cluster's quotas per model, time dilation).
    speedup = cluster.prepare(cell, needed, max_speedup)
    nodes = cluster.nodes()[:needed]
    if len(nodes) < needed:
        raise ClusterError(f"{cell.label} needs {needed} nodes, the {cluster.name} cluster "
                           f"has {len(nodes)}: bring up a larger cluster")

    monitor = None
    launched: list[Launched] = []
    specs: list[ProcessSpec] = []
    offsets_s = _clock_offsets(cluster, nodes)
    t_launch, t_launch_mono = time.time(), time.monotonic()
    outcome, culprit, error = "failed", None, ""
    oom_before: dict[str, int] = {}
    # Providers that limit a node's memory can tell when it thrashes at the limit.
    thrash_watch = ThrashWatch(nodes, cluster.memory_pressure)
    straggler = Straggler(cell, cluster)  # one node slowed (profiler.sweep.stragglers)
    try:
        specs = engine.plan(cell, nodes, cell_dir, options)
        oom_before = {n.name: cluster.oom_killed(n) for n in nodes}
        if monitor_interval_s:
            monitor = CellMonitor(cluster, cell_dir, cell, sweep_id, monitor_interval_s,
                                  traffic_file=traffic_file)
            monitor.start(nodes, stop)
        for spec in specs:
            if stop.requested:
                break
            # The start event names the node (MXNet's ranks are the KVStore's own).
            proc = cluster.start(spec.node, spec.argv, {**spec.env, NODE_ENV: spec.node.name},
                                 cell_dir / "logs" / f"{spec.name}.log", role=spec.role)
            launched.append(Launched(spec, proc))
        straggler.start(specs, t_launch_mono, cell_dir=cell_dir,
                        threads=options.threads_per_process)
        if monitor:
            monitor.track(_pids_by_node(launched), nodes)
        if stop.requested:
            outcome = "interrupted"
        else:
            outcome, culprit = _wait(launched, t_launch_mono, timeout_s, stop,
                                     _epoch_reporter(cell_dir / "events", on_epoch),
                                     thrash_watch.check)
    except Exception as exc:  # noqa: BLE001 - any failure is this cell's, not the sweep's
        outcome, error = "error", f"{type(exc).__name__}: {exc}"
    finally:
        _reap(launched, stop)
        straggler.stop()  # restores the node, whatever happened
        if monitor:
            monitor.stop(stop)
    t_reaped = time.time()
    # Nodes with disks of their own hand back what the cell wrote there.
    fetch_problems = cluster.collect(cell_dir, nodes) if launched else []

    events = read_cell_events(cell_dir / "events")
    oom_kills = sum(cluster.oom_killed(n) - oom_before.get(n.name, 0) for n in nodes)
    if outcome == "interrupted":
        status, reason = "failed", stop.reason
    elif error:
        status, reason = "failed", f"could not run the cell: {error}"[:500]
    else:
        status, reason = _judge(outcome, culprit, launched, events, oom_kills, cell_dir,
                                timeout_s, thrash_watch.reason)
    if fetch_problems:
        reason = "; ".join(r for r in (reason, "could not fetch from " +
                                       ", ".join(fetch_problems)) if r)
    try:
        breakdown = breakdown_columns(cell, cell_dir, events, specs, offsets_s)
    except (OSError, ValueError) as exc:  # a broken steps file must not lose the result
        breakdown = {}
        reason = "; ".join(r for r in (reason, f"no step breakdown: {exc}") if r)
    record = {**asdict(cell), "cell_id": cell.cell_id, "sweep_id": sweep_id,
              "cluster": cluster.name, "attempt": attempt, "status": status, "reason": reason,
              "launched_at": t_launch, "reaped_at": t_reaped, "timeout_s": timeout_s,
              "speedup": speedup,
              **events.columns(t_launch), **breakdown}
    straggler.finish(record, nodes)
    # Divergence does not change the status (the run was measured like any other) but
    # must never pass unseen: its reason leads the record's.
    divergence_reason = record.pop("divergence")
    if divergence_reason:
        record["reason"] = "; ".join(r for r in (divergence_reason, reason) if r)
    # A cell that did not end well (oom, timeout, failed) is summarized from its first
    # worker start (or its launch) to its reaping: its memory peak or its stalled
    # traffic is what a user diagnosing it wants to see.
    window = events.train_window() or (
        min((e["t"] for e in events.of("start")), default=t_launch), t_reaped)
    if monitor and launched:
        worker_nodes = sorted({l.spec.node.name for l in launched if l.spec.role == "worker"})
        try:
            record.update(monitor.summary(worker_nodes, *window,
                                          work=cell_work(events, speedup)))
        except Exception as exc:  # a broken spool must not lose the training result
            record["reason"] = (reason + "; " if reason else "") + f"no metrics summary: {exc}"
    return record


def _wait(launched: list[Launched], t_launch_mono: float, timeout_s: float | None,
          stop: StopRequest, report: Callable[[], None],
          thrashing: Callable[[], str | None] = lambda: None
          ) -> tuple[str, Launched | None]:
    """Poll until every decisive process ended.

    Returns the outcome (``ok``, ``error``, ``timeout``, ``interrupted`` or
    ``thrashing``) and, for ``error``, the process seen failing first: the one to blame,
    not the others that the reaping kills afterwards. ``thrashing()`` returns why a node
    is out of memory in effect (``sweep.thrashing``), or ``None``.
    """
    decisive = [l for l in launched if l.spec.decisive]
    next_report_s = time.monotonic() + PROGRESS_EVERY_S
    while True:
        if stop.requested:
            return "interrupted", None
        if time.monotonic() >= next_report_s:
            report()
            next_report_s += PROGRESS_EVERY_S
        for l in launched:
            if l.returncode is None:
                l.returncode = l.proc.poll()
        # Seen within one poll, a process killed by a signal is the cause and the others
        # its echo (Gloo peers exit at once on a reset connection): blame it first.
        failed = sorted((l for l in launched if l.returncode not in (None, 0)),
                        key=lambda l: l.returncode > 0)
        decisive_failed = [l for l in failed if l.spec.decisive]
        if decisive_failed:
            return "error", failed[0]
        if all(l.returncode is not None for l in decisive):
            # Servers that die early are fine only if every worker finished.
            return "ok", None
        if failed:
            return "error", failed[0]  # a dead scheduler/server leaves workers waiting forever
        if timeout_s and time.monotonic() - t_launch_mono > timeout_s:
            return "timeout", None
        if thrashing():
            return "thrashing", None
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


def _reap(launched: list[Launched], stop: StopRequest) -> None:
    """Let helper roles exit by themselves for a moment, then kill every group at once.

    Interrupted cells skip that moment; a second signal also cuts the SIGTERM grace.
    """
    if not stop.requested:
        deadline = time.monotonic() + ROLE_EXIT_GRACE_S
        for l in launched:
            if l.returncode is None:
                try:
                    l.returncode = l.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
    codes = kill_groups([l.proc for l in launched], grace_s=KILL_GRACE_S,
                        hurry=lambda: stop.hurry)
    for l, code in zip(launched, codes):
        if l.returncode is None:
            l.returncode = code


def _judge(outcome: str, culprit: Launched | None, launched: list[Launched],
           events: CellEvents, oom_kills: int, cell_dir: Path,
           timeout_s: float | None, thrash_reason: str | None = None) -> tuple[str, str]:
    if outcome == "timeout":
        return "timeout", f"no result within --timeout {timeout_s:g} s"
    if outcome == "thrashing":
        return "oom", thrash_reason or "a node thrashed at its memory limit"
    oom_event = events.error_of_kind("oom")
    if oom_kills or oom_event or (culprit is not None and culprit.returncode == EXIT_OOM):
        where = oom_event or (f"{oom_kills} process(es) killed by the node memory limit"
                              if oom_kills else "out of memory")
        return "oom", where
    if outcome == "ok" and events.complete():
        return "ok", ""
    if outcome == "ok":
        return "failed", "workers exited without an end event"
    if culprit is None:
        return "failed", "unknown failure"
    return "failed", f"{culprit.spec.title} {_exit_text(culprit.returncode)}: " + _last_line(
        cell_dir / "logs" / f"{culprit.spec.name}.log")


def _exit_text(returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            pass
    return f"exited {returncode}"


def _last_line(log: Path, limit: int = 200) -> str:
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no log)"
    return (lines[-1] if lines else "(empty log)")[:limit]


def _clock_offsets(cluster: Cluster, nodes) -> dict[str, float]:
    """Each node's clock minus this host's, for providers whose nodes have their own
    clocks (measured as the cell starts: clocks drift over a sweep of hours)."""
    try:
        return cluster.clock_offsets(nodes)
    except (OSError, ClusterError):
        return {}  # the steps keep the nodes' own clocks; the cell itself may still run


def _pids_by_node(launched: list[Launched]) -> dict[str, dict[str, list[int]]]:
    out: dict[str, dict[str, list[int]]] = {}
    for l in launched:
        out.setdefault(l.spec.node.name, {}).setdefault(l.spec.role, []).append(l.proc.pid)
    return out
