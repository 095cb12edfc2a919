"""Published studies as preset sweeps: ``edgeprof study NAME``, one plugin per study.

A study is one package (``park2019/``) with a ``base.Study`` subclass, registered here
with one line in ``STUDIES`` (or an installed distribution's entry point of the group
``edgeprof.studies`` naming it: ``profiler.plugins``); ``edgeprof study`` lists them,
``plan.plan`` and ``plan.run`` run any of them, and ``edgeprof report`` finds the section
of the study that made a sweep (sweep.json's ``extra.study``) in what this registry
offers the report (``report.study_section.offer_studies``: the report imports no study).
docs/study.md, "Adding a study".
"""

from __future__ import annotations

from ..errors import ConfigError
from ..plugins import Registry
from ..report.study_section import offer_studies
from .base import Grid, Study, StudyOption
from .park2019 import Park2019
from .plan import StudyPlan, StudySettings, plan, run
from .zhang2018 import Zhang2018

STUDIES: Registry[Study] = Registry("edgeprof.studies", Study, {study.name: study for study in (
    Park2019(),
    Zhang2018(),
)}, kind="study", instances=True)

# Read when a report asks, so that a study added to STUDIES later is offered too.
offer_studies(lambda: {name: study.section for name, study in STUDIES.items()},
              STUDIES.problem)

__all__ = ["STUDIES", "Grid", "Study", "StudyOption", "StudyPlan", "StudySettings",
           "get_study", "plan", "run"]


def get_study(name: str) -> Study:
    if name not in STUDIES:
        STUDIES.refuse_broken([name])  # an installed plugin that failed: its own line
        raise ConfigError(f"unknown study {name!r}: use {', '.join(sorted(STUDIES))}")
    return STUDIES[name]
