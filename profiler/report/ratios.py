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

Repeats (``edgeprof study NAME --repeats R``): a study's ratios are computed once per
repeat, from repeat k's cells together (``per_repeat``), and merged into one row whose
``ours`` is the median of the repeats' values and whose ``values`` give the range; the
verdict is judged on the median. A row whose cells trained fewer steps per worker in an
epoch than the study's minimum (``steps_per_worker``, ``Study.min_steps``), or a timed
row one of whose cells trained under ``MIN_WINDOW_S`` seconds, is "too few steps": its
number moves with the noise, so it is neither within nor outside.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from statistics import median
from typing import Callable

from ..cell import DEFAULT_ENGINE
from ..status import Status
from ..sweep import board_time


@dataclass
class Ratio:
    source: str  # "Table 1", "Figure 5", ...
    measure: str  # e.g. "time 4 / 1 devices"
    config: str  # the cells compared
    study: float | None
    ours: float | None  # with repeats, the median of ``values``
    band: float  # within when ours / study lies in [1 / band, band]
    comparable: bool = True
    note: str = ""
    # The records the ratio was computed from: their steps decide "too few steps".
    cells: tuple = field(default=(), repr=False, compare=False)
    values: tuple = ()  # ours, one per repeat that had it (empty: a single run's ``ours``)
    too_few_steps: bool = False  # a cell trained fewer steps than the study's minimum
    # A time or CPU share over the cells' training: judged only when every cell trained
    # ``MIN_WINDOW_S`` (a memory level, a byte count or an accuracy is not).
    timed: bool = False

    @property
    def within(self) -> bool | None:
        """Inside the band; None when it cannot be judged (missing cell, not comparable,
        too few steps)."""
        if not self.comparable or self.too_few_steps or self.ours is None or not self.study:
            return None
        if isinstance(self.study, bool):
            return self.ours == self.study
        quotient = self.ours / self.study
        return 1 / self.band <= quotient <= self.band

    @property
    def verdict(self) -> str:
        """within, outside, too few steps, not comparable or no cell."""
        if not self.comparable:
            return "not comparable"
        if self.ours is None or not self.study:
            return "no cell"
        if self.too_few_steps:
            return "too few steps"
        return "within" if self.within else "outside"

    @property
    def spread(self) -> tuple[float, float] | None:
        """(lowest, highest) of ours over the repeats; a single run's value twice."""
        numbers = [v for v in (self.values or (self.ours,))
                   if v is not None and not isinstance(v, bool)]
        return (min(numbers), max(numbers)) if numbers else None


def summary(rows: list[Ratio]) -> dict:
    """How many rows were judged, within and outside their band, and why the others were
    not: too few steps, not comparable (other data), missing (no finished cell)."""
    verdicts = [r.verdict for r in rows]
    within, outside = verdicts.count("within"), verdicts.count("outside")
    return {"rows": len(rows), "judged": within + outside, "within": within,
            "outside": outside, "too_few_steps": verdicts.count("too few steps"),
            "not_comparable": verdicts.count("not comparable"),
            "missing": verdicts.count("no cell")}


def steps_per_worker(r: dict | None) -> float | None:
    """Steps each worker trained in an epoch: the recorded count (``syncs_per_worker``,
    the workers' mean over every epoch run) over the epochs run; else the training
    samples cut into each worker's batches (a shard each, or the whole set replicated)."""
    if not r:
        return None
    epochs = len(r.get("epoch_s") or ()) or r.get("epochs") or 1
    if r.get("syncs_per_worker") is not None:
        return float(r["syncs_per_worker"]) / epochs
    samples, batch = r.get("train_samples"), r.get("batch")
    if not samples or not batch:
        return None
    parts = (r.get("devices") or 1) if r.get("data_partition", "shard") == "shard" else 1
    return float(int(samples) // parts // int(batch))


# The fewest seconds of training (the host's clock) a cell of a timed ratio (a time, or a
# CPU share; ``Ratio.timed``) must have: a shorter one is a few steps of wall time whose
# one-off delays of tens of ms weigh a fifth, or a CPU mean of one or two 1 s samples (the
# window's first, the processes' start-up, is skipped: metrics.reducers.CpuReducer).
# Measured on park2019 (docs/study.md): LeNet-MLP's one-device cell at 0.6-1.0 s put
# Table 1's medians at 0.79-1.38 of the study's over two budgeted runs, 3 of 9 verdicts
# changing (2 of the 5 far from an edge); at 2.6-3.2 s, the 7 far from an edge held.
# Figure 4's CPU, 10 / 1 devices: 0.49-0.96 with the one-device cell at 2 s, 0.80-0.89
# and 0.84-0.85 at 2.8-3.8 s.
MIN_WINDOW_S = 2.5


def too_short(*records: dict | None) -> str:
    """Why a timed ratio of these cells is not judged (a cell trained under
    ``MIN_WINDOW_S``), or ""; a missing record or one without ``train_s`` passes."""
    short = [r["train_s"] for r in records
             if r and r.get("train_s") is not None and r["train_s"] < MIN_WINDOW_S]
    if not short:
        return ""
    return (f"a cell trained {min(short):.2f} s, under the {MIN_WINDOW_S} s a time or "
            "CPU share needs")


def judge_steps(rows: list[Ratio], min_steps: int) -> list[Ratio]:
    """Each row marked "too few steps" when one of its finished cells trained fewer steps
    per worker (an epoch) than ``min_steps``, or, for a timed row, under ``MIN_WINDOW_S``
    (its note says so); a cell that did not finish (out of memory) trained none, and a
    row about that is judged as it is."""
    marked = []
    for row in rows:
        ran = [r for r in row.cells if r and r.get("status", Status.OK) == Status.OK]
        few = any(s is not None and s < min_steps for s in map(steps_per_worker, ran))
        short = too_short(*ran) if row.timed else ""
        note = "; ".join(n for n in (row.note, short) if n)
        marked.append(replace(row, too_few_steps=row.too_few_steps or few or bool(short),
                              note=note))
    return marked


def by_repeat(records: list[dict]) -> dict[int, list[dict]]:
    """Records grouped by their repeat (0 for a record written before repeats)."""
    groups: dict[int, list[dict]] = {}
    for r in records:
        groups.setdefault(int(r.get("repeat") or 0), []).append(r)
    return dict(sorted(groups.items()))


def per_repeat(records: list[dict], rows_of: Callable[[list[dict]], list[Ratio]],
               min_steps: int = 0) -> list[Ratio]:
    """A study's ratios (``rows_of``: its rows from one run's records) computed on each
    repeat's records and merged by (source, measure, config): ours is the median over the
    repeats that have it, ``values`` all of them; a row is not comparable when one
    repeat's is not, "too few steps" when one repeat's cells trained fewer than
    ``min_steps``. One repeat: its rows as they are (their ``values`` one each)."""
    merged: dict[tuple, list[Ratio]] = {}
    for group in by_repeat(records).values():
        for row in judge_steps(rows_of(group), min_steps):
            merged.setdefault((row.source, row.measure, row.config), []).append(row)
    return [_merge(rows) for rows in merged.values()]


def _merge(rows: list[Ratio]) -> Ratio:
    first = rows[0]
    values = tuple(r.ours for r in rows if r.ours is not None)
    if not values:
        ours = None
    elif isinstance(first.study, bool):
        ours = all(values)  # e.g. out of memory: in every repeat
    else:
        ours = median(values)
    odd = next((r for r in rows if not r.comparable), None)
    short = next((r for r in rows if r.too_few_steps and r.note), None)  # says why
    return replace(first, ours=ours, values=values,
                   comparable=odd is None, note=(odd or short or first).note,
                   cells=tuple(c for r in rows for c in r.cells),
                   too_few_steps=any(r.too_few_steps for r in rows))


class Cells:
    """Finished cells by configuration (first engine in name order wins a tie, the
    default engine first)."""

    def __init__(self, records: list[dict], first_engine: str = DEFAULT_ENGINE):
        self.records = sorted(records, key=lambda r: (r.get("engine") != first_engine,
                                                      r.get("engine", "")))

    def get(self, model: str, batch: int, devices: int, sync: str = "sync",
            layers: int | None = None, epochs: int | None = None, status: str = Status.OK):
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
