"""The time dilations shown not to move park2019's ratios, per model family (issue 47).

A dilation k runs a cell k times as fast (k times the quota, k times the link: docs/
emulated.md) and reads its times k times longer. It should change no ratio, and for
some families it does not; for others it did: Table 2's example LeNet at speedup 4 ran
1.18-1.61 x the study's ratios where undilated it ran 1.05-1.22 x (docs/study.md). So
the planner dilates a family no further than ``dilations.yaml`` says was shown neutral
for it, with the run that showed it (``benchmarks/bench_study_causes.py``: each
family's N / 1 ratios at speedup 1 and at k, one run). A family the file does not list
was never shown either way: it dilates as far as the host lets it, and the plan says so.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml

NEUTRAL = Path(__file__).with_name("dilations.yaml")


@lru_cache(maxsize=1)
def neutral_dilations(path: Path = NEUTRAL) -> dict[str, dict]:
    """family -> {"speedup": the largest k shown neutral, "shown": how}."""
    return (yaml.safe_load(path.read_text()) or {}).get("neutral", {})
