"""What a grid asks of a cluster (``GridNeeds``), worked out from the engines.

The providers (``profiler.cluster``) sit below the engines and never ask them: the
sweep hands each provider's ``check`` and ``open`` this answer instead, which says how
many nodes the largest cell occupies, how many a straggler cell does, which engines the
cells run and how to judge a node's own answer for each (``Engine.host_problem``).
"""

from __future__ import annotations

from typing import Sequence

from ..cell import CellConfig
from ..cluster import slowing_clusters
from ..cluster.base import GridNeeds
from ..engines import get_engine


def grid_needs(cells: Sequence[CellConfig], monitored: bool = False) -> GridNeeds:
    """``cells``' needs (``monitored``: with the metrics agent); an empty grid needs one
    node."""
    def nodes(of: Sequence[CellConfig]) -> int:
        return max((get_engine(c.engine).nodes_needed(c) for c in of), default=0)

    def engine_problem(name: str, answer: dict) -> str | None:
        return get_engine(name).host_problem(answer, [c for c in cells if c.engine == name])

    return GridNeeds(cells=tuple(cells), nodes=max(1, nodes(cells)),
                     slowed_nodes=nodes([c for c in cells if c.straggler != "none"]),
                     engines=tuple(sorted({c.engine for c in cells})),
                     engine_problem=engine_problem, slowing_providers=slowing_clusters(),
                     monitored=monitored)
