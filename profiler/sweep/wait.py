"""The cell runner's waiting step: poll the cell's processes until the decisive ones
ended, or the cell times out, thrashes, or is asked to stop.

A failing worker ends the wait at once: in ``dist_sync`` the other workers would
otherwise wait for it forever. While it waits, the runner tells the progress bar how
many epochs rank 0 has finished, about every second.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from .cell_run import CellRun, Ending, Launched
from .events import epochs_done

POLL_S = 0.05
PROGRESS_EVERY_S = 1.0  # how often a long cell reports its epochs to the progress bar


def wait(run: CellRun) -> Ending:
    """Poll until every decisive process ended; how the cell ended.

    For ``error`` the culprit is the process seen failing first: the one to blame, not
    the others that the reaping kills afterwards.
    """
    stop = run.req.stop
    report = _epoch_reporter(run.req.cell_dir / "events", run.req.on_epoch)
    next_report_s = time.monotonic() + PROGRESS_EVERY_S
    while True:
        if stop.requested:
            return Ending("interrupted")
        if time.monotonic() >= next_report_s:
            report()
            next_report_s += PROGRESS_EVERY_S
        ending = _exits(run.launched) or _past_limits(run)
        if ending is not None:
            return ending
        time.sleep(POLL_S)


def _exits(launched: list[Launched]) -> Ending | None:
    """Note the processes that ended since the last poll; the ending they decide, if any."""
    for p in launched:
        if p.returncode is None:
            p.returncode = p.proc.poll()
    # Seen within one poll, a process killed by a signal is the cause and the others
    # its echo (Gloo peers exit at once on a reset connection): blame it first.
    failed = sorted((p for p in launched if p.returncode not in (None, 0)),
                    key=lambda p: p.returncode > 0)
    if any(p.spec.decisive for p in failed):
        return Ending("error", failed[0])
    if all(p.returncode is not None for p in launched if p.spec.decisive):
        # Servers that die early are fine only if every worker finished.
        return Ending("ok")
    if failed:
        return Ending("error", failed[0])  # a dead scheduler/server leaves workers waiting
    return None


def _past_limits(run: CellRun) -> Ending | None:
    """``timeout`` past ``--timeout``; ``thrashing`` when a node is out of memory in
    effect (``sweep.thrashing``)."""
    timeout_s = run.req.timeout_s
    if timeout_s and time.monotonic() - run.t_launch_mono > timeout_s:
        return Ending("timeout")
    if run.thrash_watch.check():
        return Ending("thrashing")
    return None


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
