"""What the report shows of a published study: the section a study plugin hands it.

The report knows no study by name, and imports none: the study registry
(``profiler.study``, a layer above) offers its studies here when it loads
(``offer_studies``), and ``edgeprof report`` takes from ``study_sections()`` the study
that made the sweep (``sweep.json``'s ``extra.study``, or the one given to ``--study``).
That study turns the sweep's records into a ``StudySection``: its ratios with their
verdicts (``ratios.Ratio``: within, outside, too few steps, not comparable; with repeats
a median and a range), optionally its published numbers beside each matching cell
(``Match``) and figures. The page renders any study's section the same way (``html.py``,
``page.html.j2``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping

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
class StudyTable:
    """A table of the study's own (its published table extended, say): ``headings`` and
    ``rows`` of display strings, what it shows (``intro``) and lines under it."""

    title: str
    intro: str
    headings: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)


@dataclass
class StudySubsection:
    """A part of the study's section after its ratios and matches ("Beyond the ten
    boards": the study's tables past the cells it measured)."""

    title: str
    intro: str
    tables: list[StudyTable]


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
    subsections: list[StudySubsection] = field(default_factory=list)


# A study's section of a sweep, from its records (``Study.section``).
SectionMaker = Callable[[list], StudySection]
_catalog: Callable[[], Mapping[str, SectionMaker]] = dict
_problem: Callable[[str], str | None] = lambda name: None  # noqa: E731


def offer_studies(catalog: Callable[[], Mapping[str, SectionMaker]],
                  problem: Callable[[str], str | None] | None = None) -> None:
    """Let the report find studies by name: ``catalog()`` gives each study's section
    maker, read when a report asks (a study registered later is found too);
    ``problem(name)``: why a study the registry knows cannot be used (an installed
    plugin that failed to load), or None."""
    global _catalog, _problem
    _catalog = catalog
    if problem is not None:
        _problem = problem


def study_problem(name: str) -> str | None:
    """Why the study ``name`` cannot be used (``offer_studies``'s ``problem``), or None."""
    return _problem(name)


def study_sections() -> Mapping[str, SectionMaker]:
    """The studies offered (``offer_studies``), by name; none when no registry loaded."""
    return _catalog()
