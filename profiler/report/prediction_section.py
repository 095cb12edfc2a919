"""What the report shows of a prediction: the section ``edgeprof predict``'s model hands it.

The report imports no prediction: ``profiler.predict`` sits a layer above it (it reads
sweeps with the report's ``sweep_data``). Its ``report_section`` module offers its
section maker here when it loads (``offer_prediction``), as the study registry offers its
studies (``study_section.offer_studies``); ``edgeprof report`` loads it first
(``profiler.cli``'s plugins), and ``build_report`` asks ``prediction_section`` for the
sweep's. A sweep that cannot be fitted gets None: no section.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:  # figures imports matplotlib: a plan must not pay for it
    from ..figure import Figure


@dataclass
class PredictionSection:
    """The measured cells with the model's curve through and beyond them: one figure per
    fitted configuration, a table of predicted values (``headings``, ``rows`` of display
    strings), one line per fit (its terms) and why a configuration was not fitted."""

    title: str
    intro: str
    figures: list["Figure"]
    headings: list[str]
    rows: list[list[str]]
    fits: list[str] = field(default_factory=list)
    not_fitted: list[str] = field(default_factory=list)


# The section of a sweep, from its records and sweep.json (None: nothing to fit).
SectionMaker = Callable[[list, dict], "PredictionSection | None"]
_maker: SectionMaker = lambda records, meta: None  # noqa: E731


def offer_prediction(maker: SectionMaker) -> None:
    """Let the report show a sweep's prediction: ``maker(records, meta)`` gives its
    section (``meta``: the sweep's sweep.json, whose ``extra`` may name a study's epoch)."""
    global _maker
    _maker = maker


def prediction_section(records: list[dict], meta: dict | None = None
                       ) -> PredictionSection | None:
    """The sweep's prediction section (None: none offered, or nothing fitted)."""
    return _maker(records, meta or {})
