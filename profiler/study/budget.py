"""``edgeprof study NAME --budget 30m``: the scale of each part of a study chosen from the
estimate (``estimate.py``) so that the study fits a time budget.

The rule, kept simple (the printed plan says what it chose and what it left out):

1. **Parts.** A study's parts are the names its ``Study.parts_option`` selects
   (park2019: ``--parts``, one per table or figure); a study without parts is one part.
   Each part is estimated at its minimum: every cell at the study's floor of steps per
   worker (the grid's floor; the smallest rung of ``SCALES`` is below every cell's).
   In the study's order a part is kept while the kept parts' minima fit the budget; a
   part that does not is left out (the plan gives its minimum), and a later, smaller
   part may still fit. If none fits, the budget is refused in one line.
2. **Scales.** The kept parts then climb ``SCALES`` one rung at a time, round robin in
   the study's order; a part goes up a rung only if the sum of the parts' estimates
   still fits, and stops at its last rung that fits (or whose grid can be built: a
   rung needing more data than is on this machine stops it too). Cheap parts (LeNet)
   so climb past expensive ones (ResNet), and every part trains at least its minimum.
3. **Speed-up** (``plan.py``): on nodes of a profile (the emulated cluster), unless
   ``--speedup`` is given, the cells run with time dilation up to ``MAX_SPEEDUP``: each
   cell gets the largest calibrated factor its nodes and this host allow
   (``profiles.dilation``), which the estimate already follows.
4. **The profile check** that runs first (``--profile-check``) is not in the estimate:
   ``CHECK_S`` of the budget is kept for it when it will run.
5. **At run time** (``Keeper``) the budget is kept to its time whatever the estimate
   said: a cell starts only when it is expected to end within the budget plus
   ``OVERRUN``, its estimate scaled by how the run's finished cells compared with
   theirs (the estimate errs by up to 1.75 x on a host unlike the one it was fitted
   on: 42 min for 30 before its refit). The cells held back are not run; the study
   says how many, and ``--resume`` runs them.

The sum of the parts' estimates counts a cell two parts share twice, and each part's
own validation set is at least the whole grid's: the chosen grid's estimate is at most
that sum, so within the budget.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Callable

from ..errors import ConfigError
from .estimate import shown

# Fractions of the study's data, largest first; the last rung is below every cell's
# floor of steps (a study's grid raises such cells to its minimum).
SCALES = (1.0, 0.5, 0.2, 0.1, 0.05, 0.02, 0.01, 0.005, 0.002, 0.001, 0.0001)
# The profile check before the study (docs/study.md: about 4 minutes when it
# re-calibrates every model family at the dilations its cells get).
CHECK_S = 240.0
_UNITS_S = {"": 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_duration_s(text: str) -> float:
    """``30m``, ``1h``, ``1h30m``, ``90s``, ``45`` (seconds) -> seconds."""
    raw = str(text).strip().lower().replace(" ", "")
    parts = re.findall(r"(\d+(?:\.\d+)?)(min|h|m|s|)", raw)
    if not raw or "".join(n + u for n, u in parts) != raw or \
            sum(1 for _, u in parts if u == "") > (1 if len(parts) == 1 else 0):
        raise ConfigError(f"--budget {text}: give a duration such as 30m, 1h, 1h30m, 90s "
                          "or 45 (seconds)")
    seconds = sum(float(n) * _UNITS_S[u] for n, u in parts)
    if seconds <= 0:
        raise ConfigError(f"--budget {text}: give a duration above zero, e.g. 30m")
    return seconds


@dataclass
class PartChoice:
    part: str | None  # None: the study has no parts (the whole)
    scale: float | None  # None: left out
    estimate_s: float  # at ``scale``; left out: at its minimum


@dataclass
class Choice:
    budget_s: float
    reserved_s: float = 0.0  # kept for the profile check
    parts: list[PartChoice] = field(default_factory=list)

    @property
    def kept(self) -> list[PartChoice]:
        return [p for p in self.parts if p.scale is not None]

    @property
    def left_out(self) -> list[PartChoice]:
        return [p for p in self.parts if p.scale is None]

    def scale(self) -> float | dict[str, float]:
        """What ``Study.grid`` takes: one fraction per part, or the whole's."""
        if len(self.parts) == 1 and self.parts[0].part is None:
            return self.parts[0].scale
        return {p.part: p.scale for p in self.kept}

    def notes(self) -> list[str]:
        """The plan's lines: what was chosen, and what was left out to fit."""
        check = f" ({shown(self.reserved_s)} of it kept for the profile check)" \
            if self.reserved_s else ""
        chosen = ", ".join((f"{p.part} {p.scale:g}" if p.part else f"scale {p.scale:g}")
                           + f" ({shown(p.estimate_s)})" for p in self.kept)
        floor = f" (scale {SCALES[-1]:g}: every cell at its minimum steps)" \
            if any(p.scale == SCALES[-1] for p in self.kept) else ""
        lines = [f"--budget {shown(self.budget_s)}{check}: chosen from the estimate, "
                 f"{chosen}{floor}"]
        if self.left_out:
            lines.append("left out to fit: " + ", ".join(
                f"{p.part} (at least {shown(p.estimate_s)})" for p in self.left_out))
        return lines

    def recorded(self) -> dict:
        """What sweep.json keeps of the choice."""
        return {"budget_s": self.budget_s,
                "budget_left_out": [p.part for p in self.left_out]}


def choose(parts: list[str | None], part_s: Callable[[str | None, float], float | None],
           budget_s: float, reserved_s: float = 0.0,
           scales: tuple[float, ...] = SCALES) -> Choice:
    """The module doc's rule. ``part_s(part, scale)``: the part's estimated seconds at
    ``scale``, None when its grid cannot be built there (too little data)."""
    available = budget_s - reserved_s
    choice = Choice(budget_s, reserved_s)
    floor = scales[-1]
    spent = 0.0
    for part in parts:
        least = part_s(part, floor)
        if least is None:
            raise ConfigError(f"part {part}: no grid at scale {floor:g}")
        fits = spent + least <= available
        choice.parts.append(PartChoice(part, floor if fits else None, least))
        spent += least if fits else 0.0
    if not choice.kept:
        smallest = min(choice.parts, key=lambda p: p.estimate_s)
        what = f"its smallest part, {smallest.part}," if smallest.part else "the study"
        raise ConfigError(
            f"--budget {shown(budget_s)}: {what} needs about {shown(smallest.estimate_s)} at "
            f"its minimum steps" + (f" (plus {shown(reserved_s)} for the profile check)"
                                    if reserved_s else "")
            + f": give at least {shown(smallest.estimate_s + reserved_s)}")
    rising = list(choice.kept)
    while rising:
        for p in list(rising):
            rung = scales.index(p.scale)
            if rung == 0:
                rising.remove(p)
                continue
            seconds = part_s(p.part, scales[rung - 1])
            if seconds is None or spent - p.estimate_s + seconds > available:
                rising.remove(p)
                continue
            spent += seconds - p.estimate_s
            p.scale, p.estimate_s = scales[rung - 1], seconds
    return choice


def grid_within(study, options: dict, engine: str, available: set[str], budget_s: float,
                grid_s: Callable[[object], float], reserved_s: float = 0.0):
    """The study's grid chosen for ``budget_s`` (``options`` parsed, ``grid_s`` the
    estimate of a grid's seconds): (grid, choice, scale)."""
    key = study.parts_option
    parts: list[str | None] = [None]
    if key:
        default = next((o.default for o in study.options if o.name == key), ())
        parts = list(options.get(key) or study.parse({key: default}).get(key) or ())

    def part_s(part: str | None, scale: float) -> float | None:
        given = {**options, key: (part,)} if key else options
        try:
            return grid_s(study.grid(scale, given, engine, available))
        except ConfigError:
            return None  # e.g. more samples than the data here holds

    choice = choose(parts, part_s, budget_s, reserved_s)
    scale = choice.scale()
    given = {**options, key: tuple(p.part for p in choice.kept)} if key else options
    grid = study.grid(scale, given, engine, available)
    grid.notes = choice.notes() + grid.notes
    grid.recorded = {**grid.recorded, **choice.recorded()}
    return grid, choice, scale


# A run may end this much past its budget (a cell's estimate errs: it is not cut short).
OVERRUN = 1.05


class Keeper:
    """``SweepSettings.may_start`` for a budget ending ``deadline_s`` (on ``clock``):
    a cell starts when its estimated time (``cell_s``) times the run's pace so far fits
    in what is left; ``observe`` (the sweep's ``on_record``) keeps that pace."""

    def __init__(self, deadline_s: float, cell_s: Callable[[object], float],
                 clock: Callable[[], float] = time.monotonic):
        self.deadline_s, self.cell_s, self.clock = deadline_s, cell_s, clock
        self.estimated_s = self.actual_s = 0.0
        self.started_s: float | None = None  # when the cell running now started
        self._pending = 0.0  # its estimate

    @property
    def pace(self) -> float:
        """Measured over estimated time of the cells finished so far (1 before any)."""
        return self.actual_s / self.estimated_s if self.estimated_s > 0 else 1.0

    def __call__(self, cell) -> str | None:
        left_s, need_s = self.deadline_s - self.clock(), self.cell_s(cell) * self.pace
        if need_s > left_s:
            return (f"the budget is spent ({shown(max(0.0, left_s))} left, a cell needs "
                    f"about {shown(need_s)})")
        self.started_s, self._pending = self.clock(), self.cell_s(cell)
        return None

    def observe(self, record: dict) -> None:
        """A cell ended: its time against its estimate."""
        if self.started_s is None:
            return
        self.actual_s += self.clock() - self.started_s
        self.estimated_s += self._pending
        self.started_s = None
