"""Engines side by side: the same cell (every setting but the engine) on each engine.

What ``edgeprof compare A B --ignore engine`` does across two sweeps, done within one
sweep for the report: a row per configuration that ran ``ok`` on two engines or more,
with each engine's time per epoch, training rate and accuracy, and each engine's time
relative to the first engine of the row (MXNet first: the study's engine). A pipeline
cell's engine is its shape (``torch-pipe M4 1f1b``): data and pipeline parallelism on
the same devices side by side.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..cell import DEFAULT_ENGINE
from ..engines import ENGINES, engine_label
from ..status import Status

# Every cell setting but the engine (and the engines' own, which the engine's label
# carries), and what the cell does (``Engine.task``): what makes two cells "the same".
SAME_CELL = ("model", "layers", "batch", "devices", "sync", "epochs", "lr", "momentum", "wd",
             "lr_scaling", "max_samples", "dataset", "placement", "straggler", "task")
MEASURES = (("epoch_s_mean", "s/epoch"), ("samples_per_s", "samples/s"),
            ("val_accuracy", "val acc"))


@dataclass
class Row:
    config: dict
    by_engine: dict[str, dict] = field(default_factory=dict)


def side_by_side(records: list[dict]) -> tuple[list[str], list[Row]]:
    """The engines present, in display order, and one row per configuration that at
    least two of them ran ``ok``."""
    rows: dict[tuple, Row] = {}
    for r in records:
        if r.get("status") != Status.OK:
            continue
        engine = ENGINES.get(str(r.get("engine")))
        task = engine.task(r) if engine else "train"
        config = {k: task if k == "task" else r.get(k) for k in SAME_CELL}
        row = rows.setdefault(tuple(config.values()), Row(config))
        epochs = [e for e in (r.get("epoch_s") or []) if e is not None]
        # Each pipeline shape (M, schedule, ...) is an engine of its own here: the
        # row's configuration fixes the devices, and with them the stages.
        row.by_engine[engine_label(r, stages=False)] = {
            **r, "epoch_s_mean": sum(epochs) / len(epochs) if epochs else None}
    shared = [row for row in rows.values() if len(row.by_engine) >= 2]
    engines = sorted({e for row in shared for e in row.by_engine},
                     key=lambda e: (e != DEFAULT_ENGINE, e))
    return engines, shared
