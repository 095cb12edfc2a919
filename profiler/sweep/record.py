"""The cell runner's last step: the attempt's result record (not yet stored).

The record is the cell's configuration, who ran it, its status and reason, its events'
columns (``sweep.events``), its step breakdown (``profiler.timeline``), its straggler's
columns and its resource summary (``metrics.summary``). A part that cannot be computed
(a broken steps file, a broken spool) is named in the reason; the training result is
kept.
"""

from __future__ import annotations

from ..engines import cell_label
from ..metrics.energy import cell_work
from ..timeline.record import breakdown_columns
from .cell_run import CellRun
from .events import CellEvents


def join_reasons(*reasons: str | None) -> str:
    """The non-empty reasons, in order, joined by ``; ``."""
    return "; ".join(r for r in reasons if r)


def build_record(run: CellRun, events: CellEvents, status: str, reason: str) -> dict:
    """The attempt's record; ``status`` and ``reason`` are the judge's."""
    req = run.req
    if run.fetch_problems:
        reason = join_reasons(reason, "could not fetch from " + ", ".join(run.fetch_problems))
    try:
        breakdown = breakdown_columns(req.cell, req.cell_dir, events, run.specs, run.offsets_s,
                                      own=req.engine.summarize, label=cell_label(req.cell))
    except (OSError, ValueError) as exc:  # a broken steps file must not lose the result
        breakdown = {}
        reason = join_reasons(reason, f"no step breakdown: {exc}")
    record = {**req.cell.fields_record(), "cell_id": req.cell.cell_id, "sweep_id": req.sweep_id,
              "cluster": req.cluster.name, "attempt": req.attempt, "status": status,
              "reason": reason, "launched_at": run.t_launch, "reaped_at": run.t_reaped,
              "timeout_s": req.timeout_s, "speedup": run.speedup,
              **events.columns(run.t_launch), **breakdown}
    run.straggler.finish(record, run.nodes)  # may add to the reason
    # Divergence does not change the status (the run was measured like any other) but
    # must never pass unseen: its reason leads the record's.
    divergence_reason = record.pop("divergence")
    if divergence_reason:
        record["reason"] = join_reasons(divergence_reason, record["reason"])
    _add_summary(run, events, record)
    return record


def _add_summary(run: CellRun, events: CellEvents, record: dict) -> None:
    """The monitor's resource columns, over the training window.

    A cell that did not end well (oom, timeout, failed) is summarized from its first
    worker start (or its launch) to its reaping: its memory peak or its stalled
    traffic is what a user diagnosing it wants to see.
    """
    if not (run.monitor and run.launched):
        return
    window = events.train_window() or (
        min((e["t"] for e in events.of("start")), default=run.t_launch), run.t_reaped)
    # The workers' own start events name their nodes too: an MPI launcher starts them.
    worker_nodes = sorted({p.spec.node.name for p in run.launched if p.spec.role == "worker"}
                          | {e["node"] for e in events.of("start") if e.get("node")})
    try:
        record.update(run.monitor.summary(worker_nodes, *window,
                                          work=cell_work(events, run.speedup),
                                          worker_maxrss_mb=events.maxrss_by_node()))
    except Exception as exc:  # noqa: BLE001 - a broken spool must not lose the result
        record["reason"] = join_reasons(record["reason"], f"no metrics summary: {exc}")
