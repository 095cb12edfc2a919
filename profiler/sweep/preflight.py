"""Everything about a sweep's settings that can be known to fail, checked before it runs.

``preflight(settings)`` raises one-line ``EdgeprofError``s and touches nothing: the
cluster (its provider's own ``check``: inventory hosts, profile, speedup, stragglers),
the engines the grid needs, and the sweep folder (``--out``, ``--resume``).
``edgeprof sweep``, ``run`` and ``study`` call it before they say anything, so that bad
input never leaves half a sweep behind.
"""

from __future__ import annotations

from ..engines import get_engine
from .folder import check_sweep_dir
from .needs import grid_needs
from .sweep import SweepSettings


def preflight(settings: SweepSettings) -> None:
    cells = settings.cells
    settings.cluster.check(grid_needs(cells, settings.interval_s is not None))
    # A mixed grid would otherwise run its first engine's cells and fail the rest late.
    # Nodes with an install of their own (real boards) were checked by the provider,
    # what the cells ask of them too (``host_problem``: Open MPI for Horovod over MPI,
    # whose mpirun runs on node 0, not here); this machine still plans.
    for name in sorted({cell.engine for cell in cells}):
        engine = get_engine(name)
        if not settings.cluster.own_install or engine.plans_with_packages:
            engine.check_installed()
        if not settings.cluster.own_install:
            engine.check_cells([cell for cell in cells if cell.engine == name])
    check_sweep_dir(settings)  # --out and --resume, before anything is written
