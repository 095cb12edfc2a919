"""One time dilation for the cells a study's ratio compares (``Study.dilation_group``).

On the emulated cluster each cell gets the largest calibrated speedup k that fits the
host (``profiles.dilation``): a one-device cell more than a ten-device one. Each k has
its own calibrated quota, off by its own measurement's error, and a ratio of two cells
at different k carries the quotas' error ratio: park2019's first budgeted runs put
LeNet-MLP's ten-device cells (k = 2) at 1.17 x the board's rate and its one-device cell
(k = 8) at 0.92 x, a ratio 0.79 x the truth, that no repeat shows (docs/study.md). So
every cell of a group is capped (``CellConfig.max_speedup``) at the smallest k any of
them would get alone: their quotas are one calibration's, and its error cancels. The
small cells pay for it in time, which the estimate (and so ``--budget``) counts.

And a group dilates no further than its study showed neutral for it
(``Study.neutral_speedup``: a k whose ratios were measured equal to speedup 1's, in
park2019's ``dilations.yaml``): a dilation that moves a ratio would move its verdict.
"""

from __future__ import annotations

import os
from dataclasses import replace

from ..cell import CellConfig
from ..cluster.profiles import Catalog, dilation
from ..engines import get_engine
from .base import Study


def alone(cell: CellConfig, profile: str, catalog: Catalog, speedup: float) -> float:
    """The speedup k the cell would get by itself on nodes of ``profile`` (what
    ``EmulatedCluster.prepare`` chooses), up to ``speedup``."""
    nodes = catalog.node_profiles(profile, get_engine(cell.engine).nodes_needed(cell))
    options = {k: [node.cpu_cores_for(cell.model, k) for node in nodes]
               for k in {k for node in nodes for k in node.speedups(cell.model)}}
    return dilation(options, float(len(os.sched_getaffinity(0))), speedup)


def dilated_alike(study: Study, cells: list[CellConfig], speed: str, profile: str | None,
                  catalog: Catalog, speedup: float) -> list[CellConfig]:
    """``cells`` with each of a dilation group capped at the group's smallest k; as they
    are where nothing is dilated (another provider, no profile, ``speedup`` 1)."""
    if speed != "profile" or not profile or speedup <= 1:
        return cells
    least: dict = {}
    for cell in cells:
        group = study.dilation_group(cell)
        if group is not None:
            k = alone(cell, profile, catalog, min(speedup, _neutral(study, group)))
            least[group] = min(least.get(group, k), k)
    return [replace(c, max_speedup=least[g]) if (g := study.dilation_group(c)) is not None
            else c for c in cells]


def _neutral(study: Study, group) -> float:
    shown = study.neutral_speedup(group)
    return float("inf") if shown is None else max(1.0, shown)


def neutral_notes(study: Study, cells: list[CellConfig], speed: str, speedup: float
                  ) -> list[str]:
    """The plan's line on the groups a neutral dilation held below ``speedup``, and on
    those dilated with none shown neutral (nothing where nothing is dilated)."""
    if speed != "profile" or speedup <= 1:
        return []
    groups = {g for c in cells if (g := study.dilation_group(c)) is not None}
    held = sorted((str(g), k) for g in groups
                  if (k := study.neutral_speedup(g)) is not None and k < speedup)
    unshown = sorted(str(g) for g in groups if study.neutral_speedup(g) is None)
    notes = []
    if held:
        notes.append("dilated no further than shown neutral for each family: " + ", ".join(
            f"{g} x {k:g}" for g, k in held))
    if unshown:
        notes.append(f"dilated with no dilation shown neutral: {', '.join(unshown)} "
                     "(benchmarks/bench_study_causes.py shows one)")
    return notes
