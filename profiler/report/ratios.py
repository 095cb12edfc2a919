"""A study's findings as ratios, ours beside theirs, each inside or outside a band.

Absolute numbers of a published study cannot match ours: other boards (or an emulation
of them), other software, a fraction of the data. What a reproduction can match is the
*shape*: how time, accuracy, CPU, memory and network change with devices, depth, batch,
sync mode and epochs. So a study (``profiler.study``) sets each finding as a ``Ratio``
of two of our cells beside the same ratio of its published numbers, where the
hardware's speed and the amount of data cancel; this module holds what every study's
ratios share: the row, its verdict, the counts, and the readers of a record's time,
resources and accuracy.

Times are the cell's training time per training sample over its run, without the
run's first step and with slow moments of the host left out (``robust_s_per_sample``,
``profiler.timeline.rate``; the first step's one-off costs weigh on a cut-down epoch of
a few steps as they did not on a study's hundreds). Records without it fall back on the
first epoch's figure (``steady_s_per_sample``), then on ``epoch_s[0] / train_samples``.
On a dilated emulated cluster (``--speedup``) times are multiplied, and network rates
divided, by each cell's own ``speedup``: the board's time, what the cell stands for.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..cell import DEFAULT_ENGINE
from ..sweep import board_time


@dataclass
class Ratio:
    source: str  # "Table 1", "Figure 5", ...
    measure: str  # e.g. "time 4 / 1 devices"
    config: str  # the cells compared
    study: float | None
    ours: float | None
    band: float  # within when ours / study lies in [1 / band, band]
    comparable: bool = True
    note: str = ""

    @property
    def within(self) -> bool | None:
        """Inside the band; None when it cannot be judged (missing cell, not comparable)."""
        if not self.comparable or self.ours is None or not self.study:
            return None
        if isinstance(self.study, bool):
            return self.ours == self.study
        quotient = self.ours / self.study
        return 1 / self.band <= quotient <= self.band


def summary(rows: list[Ratio]) -> dict:
    """How many rows were judged, and how many fell inside their band."""
    judged = [r for r in rows if r.within is not None]
    return {"rows": len(rows), "judged": len(judged),
            "within": sum(1 for r in judged if r.within),
            "not_comparable": sum(1 for r in rows if not r.comparable),
            "missing": sum(1 for r in rows if r.comparable and r.ours is None)}


class Cells:
    """Finished cells by configuration (first engine in name order wins a tie, the
    default engine first)."""

    def __init__(self, records: list[dict], first_engine: str = DEFAULT_ENGINE):
        self.records = sorted(records, key=lambda r: (r.get("engine") != first_engine,
                                                      r.get("engine", "")))

    def get(self, model: str, batch: int, devices: int, sync: str = "sync",
            layers: int | None = None, epochs: int | None = None, status: str = "ok"):
        for r in self.records:
            if (r.get("model"), r.get("batch"), r.get("devices"), r.get("layers")) != \
                    (model, batch, devices, layers):
                continue
            # One device trains the same whatever the sync mode (kvstore local).
            if devices > 1 and r.get("sync") != sync:
                continue
            if epochs is not None and r.get("epochs") != epochs:
                continue
            if status is not None and r.get("status") != status:
                continue
            if r.get("straggler", "none") != "none":
                continue  # a study's boards were alike
            return r
        return None


def per_sample_s(r: dict | None) -> float | None:
    """Training time per sample, without the first step (one-off costs a full-sized
    epoch spreads over hundreds of steps), in the board's time (undilated)."""
    if not r:
        return None
    for column in ("robust_s_per_sample", "steady_s_per_sample"):  # the robust one first
        if r.get(column):
            return board_time.value(r, column)
    if not r.get("epoch_s") or not r.get("train_samples"):
        return None
    return float(r["epoch_s"][0]) / float(r["train_samples"]) * board_time.speedup(r)


def measure(r: dict | None, column: str) -> float | None:
    """A resource column; a rate (``*_per_s``) undilated, like the times."""
    return board_time.value(r, column)


def accuracy(r: dict | None, epoch: int = 1) -> float | None:
    values = (r or {}).get("val_accuracy_per_epoch") or []
    return float(values[epoch - 1]) if len(values) >= epoch and values[epoch - 1] is not None \
        else None


def div(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None
