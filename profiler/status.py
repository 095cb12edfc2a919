"""A cell's status: one string-valued enum, so that no module spells the statuses again.

``StrEnum``: a member is its string (``Status.OK == "ok"``, ``str(Status.OK) == "ok"``,
JSON and CSV write ``ok``), so records read back from results.jsonl compare equal to the
members and records written before the enum are unchanged.
"""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    OK = "ok"  # trained to the end; its measures hold
    OOM = "oom"  # a node ran out of memory (killed, or thrashed at its limit)
    TIMEOUT = "timeout"  # no result within the cell's time limit
    FAILED = "failed"  # anything else: the reason says what


# Statuses that a resumed sweep does not run again; ``failed`` cells are retried
# because failures are mostly transient (a port taken, an interrupted run).
FINAL = (Status.OK, Status.OOM, Status.TIMEOUT)
