"""A finished cell's training progress and outcome as points, for InfluxDB and Grafana.

The workers' events (``events/worker-<rank>.jsonl``) and the cell's record become a spool
of their own beside the cell's metrics, ``<cell attempt>/train-spool/``, written when the
cell ends; the live shipper drains it with the cell's other spools and ``edgeprof ship``
delivers it later like any spool. Tags: the cell's configuration, ``sweep``, ``cell``,
``role=worker`` (and ``rank`` on ``train``), as on the agents' points.

- ``train`` (tag ``event``: ``epoch`` or ``end``, ``rank``): ``epoch``, ``epoch_s``,
  ``train_loss``, ``val_accuracy``, ``samples`` per epoch; ``train_s``, ``samples_per_s``,
  ``syncs`` at the end; at the event's time.
- ``cell`` (tags ``status``, ``diverged``): ``elapsed_s``, ``train_s``, ``samples_per_s``,
  ``val_accuracy``, ``cpu_percent_mean``, ``mem_used_mb_mean``, ``net_sent_kb_per_s``,
  ``net_recv_kb_per_s``, ``devices_n``: one point when the cell was reaped, so a table
  can list every cell with its status (oom, timeout and failed included).
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

from workloads.events import read_events

from ..agent import lineproto
from ..agent.spool import SpoolWriter
from ..cell import CellConfig

SPOOL_NAME = "train-spool"
TRAIN_FIELDS = ("epoch", "epoch_s", "train_loss", "val_accuracy", "samples", "train_s",
                "samples_per_s", "syncs")
CELL_FIELDS = ("elapsed_s", "train_s", "samples_per_s", "val_accuracy", "cpu_percent_mean",
               "mem_used_mb_mean", "net_sent_kb_per_s", "net_recv_kb_per_s")


def spool_cell_points(cell_dir: Path, cell: CellConfig, record: dict, sweep_id: str) -> int:
    """Write the cell's ``train`` and ``cell`` points; return how many."""
    base = {**cell.tags(), "sweep": sweep_id, "cell": cell.cell_id, "role": "worker",
            "host": socket.gethostname()}
    lines = []
    for path in sorted((Path(cell_dir) / "events").glob("worker-*.jsonl")):
        for event in read_events(path):
            if event.get("event") not in ("epoch", "end"):
                continue
            fields = {k: event[k] for k in TRAIN_FIELDS if _number(event.get(k))}
            line = lineproto.encode("train", {"event": event["event"],
                                              "rank": str(event.get("rank", 0))},
                                    fields, int(event["t"] * 1000))
            if line:
                lines.append(line)
    fields = {k: record[k] for k in CELL_FIELDS if _number(record.get(k))}
    fields["devices_n"] = cell.devices  # a number to plot against (the tag is a string)
    at_s = record.get("reaped_at") or time.time()
    lines.append(lineproto.encode("cell", {"status": str(record.get("status")),
                                           "diverged": str(bool(record.get("diverged"))).lower()},
                                  fields, int(at_s * 1000)))
    writer = SpoolWriter(Path(cell_dir) / SPOOL_NAME, base)
    try:
        writer.append(lines)
    finally:
        writer.close()
    return len(lines)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
