"""Everything about a sweep's settings that can be known to fail, checked before it runs.

``preflight(settings)`` raises one-line ``EdgeprofError``s and touches nothing: the
cluster (name, inventory hosts, profile, speedup), the engines the grid needs, and the
sweep folder (``--out``, ``--resume``). ``edgeprof sweep``, ``run`` and ``study`` call it
before they say anything, so that bad input never leaves half a sweep behind.
"""

from __future__ import annotations

from ..cluster import CLUSTERS, check_speedup, check_straggler
from ..engines import get_engine
from ..errors import ConfigError
from .sweep import SweepSettings, check_sweep_dir


def preflight(settings: SweepSettings) -> None:
    cells = settings.cells
    if settings.cluster not in CLUSTERS:
        raise ConfigError(f"unknown cluster {settings.cluster!r}: "
                          f"use one of {', '.join(CLUSTERS)}")
    if (settings.cluster == "inventory") != (settings.inventory is not None):
        raise ConfigError("--inventory FILE goes with --cluster inventory (and only with "
                          "it): give both, e.g. --cluster inventory --inventory "
                          "inventory.ini")
    needed = max(get_engine(c.engine).nodes_needed(c) for c in cells)
    if settings.inventory is not None:
        # Every host is checked now, before anything is written or started.
        from ..cluster.inventory import open_inventory
        open_inventory(settings.inventory, needed, cells)
    if settings.profile is not None:
        from ..cluster.profiles import load_catalog
        load_catalog().node_profiles(settings.profile, 1)  # unknown, broken YAML: one line
    check_speedup(settings.cluster, settings.speedup)
    check_straggler(settings.cluster, cells)
    if settings.cluster == "emulated":
        from ..cluster.emulated import DEFAULT_PROFILE, check_request
        check_request(needed, settings.profile or DEFAULT_PROFILE)
    # A mixed grid would otherwise run its first engine's cells and fail the rest late.
    # Real nodes run their own install (checked above); this machine still plans.
    for name in sorted({cell.engine for cell in cells}):
        engine = get_engine(name)
        if settings.inventory is None or engine.plans_with_packages:
            engine.check_installed()
    check_sweep_dir(settings)  # --out and --resume, before anything is written
