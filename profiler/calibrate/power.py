"""A board's power model fitted from a measured run (``edgeprof cluster calibrate --power-from``).

Where a node had a meter (a Pi 5's PMIC, an INA219, RAPL) its agent wrote the board's
watts and its CPU use on the same ticks; a least-squares line through (utilisation,
watts) gives the model ``profiler.metrics.energy`` applies where no meter is:
``idle_w`` (the line at 0) and ``full_w`` (at 100% of the board's cores). The fit needs
the run to span idle and busy moments; a run that stayed at one CPU level says nothing
about the slope, and is refused in one line.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from statistics import StatisticsError, correlation, linear_regression

from ..cluster.profiles import PowerModel, load_catalog
from ..errors import ConfigError
from ..metrics.energy import METERS, meter_watts
from ..agent.spool_reader import read_points
from .profiles_file import read_profiles_file, save_profiles_file

MIN_SAMPLES = 10
MIN_SPREAD = 0.2  # of the board's cores: the CPU use a fit needs to span


@dataclass(frozen=True)
class PowerFit:
    """A fitted model and what it rests on."""

    model: PowerModel
    samples: int
    r2: float
    utilisation_range: tuple[float, float]


def fit_power(pairs: list[tuple[float, float]]) -> tuple[float, float, float]:
    """(idle_w, full_w, r²) of the least-squares line through (utilisation, watts) pairs
    (utilisation 0 to 1 of the board's cores)."""
    xs, ys = [u for u, _ in pairs], [w for _, w in pairs]
    slope, intercept = linear_regression(xs, ys)
    try:
        r2 = correlation(xs, ys) ** 2
    except StatisticsError:  # constant watts: the line explains nothing further
        r2 = 0.0
    return intercept, intercept + slope, r2


def measured_pairs(run: Path, nodes: tuple[str, ...] = ()) -> list[tuple[float, float]]:
    """(utilisation, board watts) of every tick where a node's agent wrote both, over
    every spool under ``run`` (a sweep, a cell or one spool folder), of ``nodes`` only
    when given."""
    pairs = []
    for spool in sorted({p.parent for p in Path(run).rglob("seg-*.lp")}):
        if nodes and spool.name not in nodes:
            continue
        cpu: dict[int, float] = {}
        meters: dict[str, dict[int, float]] = {}
        for _base, point in read_points(spool, ("cpu", *METERS)):
            if point.measurement == "cpu" and "cpu_percent" in point.fields:
                cpu[point.time_ms] = float(point.fields["cpu_percent"]) / 100.0
            else:
                meter_watts(point, meters)
        meter = next((m for m in METERS if meters.get(m)), None)
        if meter is not None:
            pairs += [(cpu[t], w) for t, w in sorted(meters[meter].items()) if t in cpu]
    return pairs


def fit_from_run(run: Path, nodes: tuple[str, ...] = ()) -> PowerFit:
    """The board's model from a measured run; ``ConfigError`` (one line) when the run
    cannot give one."""
    if not Path(run).exists():
        raise ConfigError(f"--power-from {run}: no such folder: give a sweep or cell "
                          "folder measured on a board with a power meter")
    pairs = measured_pairs(run, nodes)
    if len(pairs) < MIN_SAMPLES:
        raise ConfigError(f"--power-from {run}: {len(pairs)} ticks with both power and CPU "
                          f"(at least {MIN_SAMPLES} needed): measure a run on a board whose "
                          "agent writes power_pmic, power_hwmon or power_rapl points")
    low, high = min(u for u, _ in pairs), max(u for u, _ in pairs)
    if high - low < MIN_SPREAD:
        raise ConfigError(f"--power-from {run}: its CPU use spans only {low:.0%} to "
                          f"{high:.0%} of the board: measure a run with idle and busy "
                          f"moments (at least {MIN_SPREAD:.0%} apart)")
    idle_w, full_w, r2 = fit_power(pairs)
    if not 0 <= idle_w <= full_w:
        raise ConfigError(f"--power-from {run}: the fit gives idle {idle_w:.2f} W and full "
                          f"{full_w:.2f} W, not a board's model: measure a longer run")
    source = (f"fitted by edgeprof cluster calibrate --power-from {run} on "
              f"{time.strftime('%Y-%m-%d')}: {len(pairs)} ticks, CPU {low:.0%}-{high:.0%}, "
              f"r2 {r2:.2f}")
    return PowerFit(PowerModel(round(idle_w, 3), round(full_w, 3), source), len(pairs), r2,
                    (low, high))


def write_power(profile: str, model: PowerModel, path: Path) -> Path:
    """Put ``model`` as ``profile``'s ``power:`` in the profiles file ``path`` (the
    profile copied there from where it is defined if the file lacks it)."""
    path = Path(path).expanduser()
    doc = read_profiles_file(path, "give another --to FILE")
    entry = (doc.get("profiles") or {}).get(profile)
    if entry is None:
        known = load_catalog().profiles
        if profile not in known:
            raise ConfigError(f"--profile {profile}: no such profile to give a power model: "
                              f"use one of {', '.join(sorted(known))}")
        entry = known[profile].as_spec()
    doc.setdefault("profiles", {})[profile] = {**entry, "power": model.as_spec()}
    save_profiles_file(path, doc)
    return path
