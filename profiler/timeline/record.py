"""The step breakdown's share of a cell's results record, and the cell's trace file.

Called by the cell runner once a cell's processes are reaped (and, on real nodes, their
files fetched): reads the step lines (``profiler.timeline.steps``), summarizes them into
results columns and writes ``trace.json`` beside the cell's events
(``profiler.timeline.trace``). A cell whose processes timed nothing (``--breakdown off``,
or killed before their first epoch ended) gets empty columns and no trace. The cell's
robust rate (``profiler.timeline.rate``) is taken here too, from the step lines where
every step was timed and from the epochs otherwise, and the engine's own columns
(``Engine.summarize``, given as ``own``: a pipeline's stages and bubble).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

from . import steps as step_lines
from . import trace
from .rate import robust_columns

TRACE_FILE = "trace.json"


def node_of_ranks(events, specs: Sequence, role: str) -> dict[int, str]:
    """``rank -> node name`` of a role's processes: the workers' start events say where
    each rank ran (MXNet's KVStore hands ranks out in its own order); the engine's plan
    says it for servers."""
    out = {spec.rank: spec.node.name for spec in specs if spec.role == role}
    if role == "worker":
        for e in events.of("start"):
            # A damaged line's node can be anything (the fuzz tests write such lines).
            if isinstance(e.get("node"), str) and e["node"] and isinstance(e.get("rank"), int):
                out[e["rank"]] = e["node"]
    return out


def breakdown_columns(cell, cell_dir: Path, events, specs: Sequence,
                      offsets_s: dict[str, float] | None = None,
                      own: Callable[[dict, dict], dict] | None = None,
                      label: str | None = None) -> dict:
    """Results columns of the breakdown, plus ``trace_file`` when a trace was written.

    ``events`` is the cell's ``profiler.sweep.events.CellEvents``; ``specs`` its
    processes as the engine planned them; ``own(workers, starts)`` the engine's own
    columns from the step lines and start events; ``label`` the trace's name for the
    cell (its ``label`` by default)."""
    worker_nodes = node_of_ranks(events, specs, "worker")
    loaded = step_lines.load_cell_steps(
        cell_dir / "events", sync=cell.sync == "sync", worker_nodes=worker_nodes,
        server_nodes=node_of_ranks(events, specs, "server"), offsets_s=offsets_s)
    start0 = events.start0()
    columns = step_lines.summarize(loaded, events.epochs_by_rank(),
                                   start0.get("steps_per_epoch"), cell.sync == "sync",
                                   ends=events.of("end"))
    columns.update(robust_columns(loaded.workers, events.epochs_by_rank(), start0,
                                  every_step_timed=not loaded.sampled))
    starts = {e["rank"]: e for e in events.of("start") if isinstance(e.get("rank"), int)}
    if own is not None:
        columns.update(own(loaded.workers, starts))
    columns["clock_offsets_s"] = offsets_s or None
    columns["trace_file"] = None
    if loaded.workers:
        path = cell_dir / TRACE_FILE
        trace.write_trace(path, trace.build_trace(loaded, events, label or cell.label))
        columns["trace_file"] = _relative_to_sweep(path)
    return columns


def _relative_to_sweep(path: Path) -> str:
    """``cells/<cell_id>/attempt-N/trace.json`` inside a sweep folder, else the path."""
    parts = path.parts
    if len(parts) >= 4 and parts[-4] == "cells":
        return "/".join(parts[-4:])
    return str(path)
