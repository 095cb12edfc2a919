"""Training events as JSON lines: ``EVENTS_DIR/worker-<rank>.jsonl``, one object a line.

Every event has ``event``, ``t`` (``time.time()``, seconds) and ``rank``. Events, in
order: ``start``, ``first_step``, ``epoch`` (once per epoch), ``end``, or ``error``
(kind ``oom`` | ``data`` | ``error``). docs/workloads.md lists their fields.

Each line is written and flushed at once, because the cell runner and the report read
the file while the worker runs, and a worker killed by the OOM killer or a timeout must
leave every event before the kill on disk. The reader therefore tolerates a torn last
line.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

# The controller's name of the node a process runs on (profiler.sweep.launch sets it):
# the start event carries it, so a cell's results name nodes, not only ranks.
NODE_ENV = "EDGEPROF_NODE"


def maxrss_mb() -> dict:
    """This process's peak resident memory from the kernel, MB: a field of ``end`` and
    ``error``.

    ``VmHWM`` of ``/proc/self/status``: the high-water mark of this process's own image,
    which starts at its ``exec``. Not ``getrusage``'s ``ru_maxrss``: Linux keeps that
    across ``exec``, so it also holds the memory of whatever started the process (a
    launcher forked from a 700 MB test process reported 708 MB for a 210 MB peak), and
    its children's figure counts the pages they shared at fork. Where there is no /proc,
    ``ru_maxrss`` is the answer there is.
    """
    try:
        with open("/proc/self/status", "rb") as handle:
            hwm_kib = next(int(line.split()[1]) for line in handle
                           if line.startswith(b"VmHWM:"))
    except (OSError, StopIteration, ValueError, IndexError):
        import resource

        hwm_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"maxrss_mb": round(hwm_kib / 1024, 3)}


def events_path(events_dir: str | Path, rank: int) -> Path:
    return Path(events_dir) / f"worker-{rank}.jsonl"


class EventWriter:
    """Appends events of one worker; ``with EventWriter(dir, rank) as ev: ev.emit(...)``."""

    def __init__(self, events_dir: str | Path, rank: int):
        self.rank = rank
        self.path = events_path(events_dir, rank)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", buffering=1, encoding="utf-8")

    def emit(self, event: str, **fields: Any) -> dict:
        record = {"event": event, "t": time.time(), "rank": self.rank, **fields}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        return record

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> "EventWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# The fields the controller computes with: a finite number (or null) where present.
# A line breaking this was not written by ``EventWriter`` (a damaged or edited file).
NUMBER_FIELDS = ("t", "rank", "epoch", "epoch_s", "first_step_s", "samples_per_s", "syncs",
                 "elapsed_s", "train_s", "train_cpu_s", "samples", "train_samples",
                 "val_accuracy", "batch", "num_workers", "steps_per_epoch", "data_shards",
                 "param_count", "classes", "maxrss_mb")
# What each kind of event must carry (a number, not null).
REQUIRED = {"epoch": ("epoch", "epoch_s")}


def is_number(value) -> bool:
    """A finite int or float (not a bool), within a float's range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int past a float's range
        return False


def well_formed(record, numbers: tuple[str, ...], required: tuple[str, ...] = ()) -> bool:
    """``record`` is a mapping whose ``numbers`` are finite numbers or null where
    present and whose ``required`` fields are numbers."""
    return (isinstance(record, dict)
            and all(record.get(k) is None or is_number(record[k]) for k in numbers)
            and all(is_number(record.get(k)) for k in required))


def read_events(path: str | Path) -> list[dict]:
    """All complete events of a file, in order; a torn, garbled or damaged line (see
    ``NUMBER_FIELDS``) is skipped."""
    events = []
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return events
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            continue  # the writer was killed mid-line, or a damaged file
        if (isinstance(record, dict) and isinstance(record.get("event"), str)
                and well_formed(record, NUMBER_FIELDS,
                                ("t", *REQUIRED.get(record["event"], ())))):
            events.append(record)
    return events
