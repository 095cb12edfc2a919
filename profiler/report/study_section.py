"""What the report shows of a published study: the section a study plugin hands it.

The report knows no study by name. The CLI asks the study registry (``profiler.study``)
for the study that made the sweep (``sweep.json``'s ``extra.study``, or the one given
to ``edgeprof report --study``), and that study turns the sweep's records into a
``StudySection``: its ratios with their verdicts (``ratios.Ratio``: within, outside,
too few steps, not comparable; with repeats a median and a range), optionally its
published numbers beside each matching cell (``Match``) and figures. The page renders
any study's section the same way (``html.py``, ``page.html.j2``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .ratios import Ratio

if TYPE_CHECKING:  # figures imports matplotlib: a study's plan must not pay for it
    from .figures import Figure


@dataclass
class Match:
    """One of our cells' measures beside the number the study published for it."""

    source: str  # e.g. "Table 1"
    cell_id: str
    config: str
    measure: str
    ours: float | None
    study: float
    comparable: bool  # False: not the study's data (accuracy) or not its unit
    note: str = ""


@dataclass
class StudySection:
    """A study's part of the report. ``intro`` and ``bands`` frame the ratios table
    (what the ratios are, and why their bands are as wide as they are); ``hardware``
    (what the study ran on) heads the "Beside the study" table of ``matches``, which is
    left out when it is empty; ``no_match`` says which cells would have matched."""

    title: str
    intro: str
    bands: str
    ratios: list[Ratio]
    matches: list[Match] = field(default_factory=list)
    hardware: str = ""
    no_match: str = ""
    figures: list["Figure"] = field(default_factory=list)
    # The study's fewest steps per worker a judged ratio's cells train (Study.min_steps),
    # said beside the "too few steps" count; 0: none.
    min_steps: int = 0
