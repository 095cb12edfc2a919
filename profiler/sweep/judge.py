"""The cell runner's judging step: a cell's status (``ok``, ``oom``, ``timeout`` or
``failed``) and its reason, from how its processes ended, its events and its nodes'
out-of-memory kills.

Out of memory wins over a process's failure: a worker killed by the node's memory limit
fails like any other, and ``oom`` is what the user needs to read.
"""

from __future__ import annotations

import signal
from pathlib import Path

from ..status import Status
from .cell_run import CellRun, Ending
from .events import CellEvents

EXIT_OOM = 3  # workloads.train's exit status for out of memory
REASON_MAX_CHARS = 500  # a reason quoting an exception is cut here


def judge(run: CellRun, events: CellEvents) -> tuple[str, str]:
    """The cell's status and reason (empty for ``ok``)."""
    ending = run.ending
    oom_kills = sum(run.req.cluster.oom_killed(n) - run.oom_before.get(n.name, 0)
                    for n in run.nodes)
    if ending.outcome == "interrupted":
        return Status.FAILED, run.req.stop.reason
    if ending.error:
        return Status.FAILED, f"could not run the cell: {ending.error}"[:REASON_MAX_CHARS]
    if ending.outcome == "timeout":
        return Status.TIMEOUT, f"no result within --timeout {run.req.timeout_s:g} s"
    if ending.outcome == "thrashing":
        return Status.OOM, run.thrash_watch.reason or "a node thrashed at its memory limit"
    oom = _oom_reason(ending, events, oom_kills)
    if oom:
        return Status.OOM, oom
    return _exit_verdict(ending, events, run.req.cell_dir)


def _oom_reason(ending: Ending, events: CellEvents, oom_kills: int) -> str | None:
    """Why the cell ran out of memory (its own event, the node's kills, the culprit's
    exit status), or None."""
    oom_event = events.error_of_kind("oom")
    if oom_event:
        return oom_event
    if oom_kills:
        return f"{oom_kills} process(es) killed by the node memory limit"
    if ending.culprit is not None and ending.culprit.returncode == EXIT_OOM:
        return "out of memory"
    return None


def _exit_verdict(ending: Ending, events: CellEvents, cell_dir: Path) -> tuple[str, str]:
    """``ok`` when the workers ended with an end event; else who failed, how, and the
    last line of its log."""
    if ending.outcome == "ok":
        if events.complete():
            return Status.OK, ""
        return Status.FAILED, "workers exited without an end event"
    culprit = ending.culprit
    if culprit is None:
        return Status.FAILED, "unknown failure"
    reason = f"{culprit.spec.title} {_exit_text(culprit.returncode)}: " + _last_line(
        cell_dir / "logs" / f"{culprit.spec.name}.log")
    # Where a started worker was (its events say): a crash after its end event lost no
    # measurement; one in the first epoch is a set-up's.
    phase = events.phase(culprit.spec.rank) if culprit.spec.role == "worker" else None
    return Status.FAILED, reason + (f" ({phase})" if phase else "")


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
