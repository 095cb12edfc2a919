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
  can list every cell with its status (oom, timeout and failed included). With the
  cell's energy and cost (issue 32) where it has them: ``energy_j``, ``avg_power_w``,
  ``j_per_sample``, ``energy_to_accuracy_j``, ``cost_usd``, ``cost_per_epoch_usd``, and
  the tag ``energy_source`` (measured, modelled or mixed). Each field from the record
  has its column's type in ``profiler.results_schema`` (these are all floats).
- ``node_energy`` (tags ``node``, ``energy_source``): ``energy_j`` and ``avg_power_w`` of
  each node over the cell's window, one point per node when the cell was reaped: the
  power of nodes no meter measures (modelled), beside the agents' measured ``power_*``.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

from workloads.events import read_events

from .. import results_schema
from ..agent import lineproto
from ..agent.spool import SpoolWriter
from ..cell import CellConfig

SPOOL_NAME = "train-spool"
TRAIN_FIELDS = ("epoch", "epoch_s", "train_loss", "val_accuracy", "samples", "train_s",
                "samples_per_s", "syncs")
# The record's columns a ``cell`` point holds, each of its schema type
# (``Column.field_value``: a float column is always a float, which InfluxDB needs).
CELL_FIELDS = ("elapsed_s", "train_s", "samples_per_s", "val_accuracy", "cpu_percent_mean",
               "mem_used_mb_mean", "net_sent_kb_per_s", "net_recv_kb_per_s",
               *results_schema.columns_of("energy", "cost", kind="float"))
_CELL_COLUMNS = [results_schema.get(name) for name in CELL_FIELDS]


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
    fields = {c.name: c.field_value(record.get(c.name)) for c in _CELL_COLUMNS}
    fields["devices_n"] = cell.devices  # a number to plot against (the tag is a string)
    at_s = record.get("reaped_at") or time.time()
    source = {"energy_source": str(record["energy_source"])} if record.get("energy_source") \
        else {}
    lines.append(lineproto.encode("cell", {"status": str(record.get("status")),
                                           "diverged": str(bool(record.get("diverged"))).lower(),
                                           **source},
                                  fields, int(at_s * 1000)))
    lines += _node_energy_lines(record, source, int(at_s * 1000))
    writer = SpoolWriter(Path(cell_dir) / SPOOL_NAME, base)
    try:
        writer.append(lines)
    finally:
        writer.close()
    return len(lines)


def _node_energy_lines(record: dict, source: dict, at_ms: int) -> list[str]:
    """A ``node_energy`` point per node of ``energy_j_by_node``; its mean watts are its
    joules over the cell's window (``energy_j / avg_power_w``, the same for all nodes)."""
    by_node = record.get("energy_j_by_node") or {}
    total_j, total_w = record.get("energy_j"), record.get("avg_power_w")
    window_s = total_j / total_w if _number(total_j) and _number(total_w) and total_w else None
    lines = []
    for node, joules in sorted(by_node.items()):
        if not _number(joules):
            continue
        fields = {"energy_j": float(joules),
                  **({"avg_power_w": joules / window_s} if window_s else {})}
        line = lineproto.encode("node_energy", {"node": str(node), **source}, fields, at_ms)
        if line:
            lines.append(line)
    return lines


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
