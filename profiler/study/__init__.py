"""Published studies as preset sweeps: ``edgeprof study park2019``.

``plan`` turns the study's settings into a sweep (cells, data, validation set, the
estimate), checking everything first and touching nothing; ``run`` checks the
emulated cluster's calibrated profile on this host (``profiler.calibrate.check``:
re-calibrated or refused when it drifted), runs that sweep like any other (resumable,
every cell kept) and ends in its report, whose "Reproducing the study" section sets
every ratio the cells allow beside the study's (``profiler.report.ratios``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..errors import DataError
from . import estimate, park2019

DEFAULT_PROFILE = estimate.CALIBRATED_PROFILE


@dataclass
class StudySettings:
    scale: float = 1.0
    parts: tuple[str, ...] = park2019.PARTS
    devices: tuple[int, ...] = park2019.ALL_DEVICES
    cluster: str = "emulated"  # a provider of profiler.cluster.PROVIDERS
    profile: str | None = None  # a provider with node profiles: pi3b-park2019 unless given
    speedup: float = 1.0
    engine: str = "mxnet"
    method: str = "scripts"  # park2019.METHODS
    profile_check: str = "recalibrate"  # calibrate.check.MODES (node profiles only)
    profile_tolerance: float = 0.25
    data_dir: Path | None = None
    inventory: Path | None = None
    out_dir: Path | None = None
    resume: bool = False
    timeout_s: float | None = None
    interval_s: float | None = 1.0
    ship_target: object | None = None
    price: object | None = None  # --price: profiler.cluster.prices.PriceSpec


@dataclass
class StudyPlan:
    sweep: object  # profiler.sweep.sweep.SweepSettings
    samples: dict[tuple, int]  # training samples per (model, layers, batch, devices)
    datasets: dict[str, str]  # model -> dataset
    val_samples: int
    estimate_s: float
    notes: list[str] = field(default_factory=list)
    method: str = "scripts"
    profile_check: str = "off"
    profile_tolerance: float = 0.25

    def describe(self) -> str:
        """What will run, in a few lines (printed before the study starts)."""
        cells = self.sweep.cells
        by_model: dict[str, list[int]] = {}
        for (model, *_), n in self.samples.items():
            by_model.setdefault(model, []).append(n)
        data = "; ".join(
            f"{model} on {self.datasets[model]}, "
            + (f"{min(ns):,}" if min(ns) == max(ns) else f"{min(ns):,}-{max(ns):,}")
            + " training samples a cell" for model, ns in by_model.items())
        lines = [f"study park2019 ({self.method}): {len(cells)} cells on the "
                 f"{self.sweep.cluster.label}; "
                 f"{data}; {self.val_samples:,} validation samples",
                 f"estimated time: about {estimate.shown(self.estimate_s)}"]
        return "\n".join(lines + self.notes)


def plan(settings: StudySettings) -> StudyPlan:
    """Check the settings and build the sweep; nothing is started or written."""
    from workloads.datasets.resolver import verify

    from ..cluster import cluster_settings, get_provider
    from ..cluster.profiles import load_catalog
    from .reference import load_reference
    from ..sweep.sweep import SweepSettings

    how = park2019.method(settings.method)
    found = park2019.experiments(settings.parts, settings.devices, how)
    samples = park2019.train_samples(found, settings.scale, how)
    available = {}
    for name in ("mnist", "mnist-5k", "fashion-mnist", "cifar10"):
        try:
            verify(name, settings.data_dir)
            available[name] = True
        except DataError:
            available[name] = False
    datasets = park2019.choose_datasets({e.model for e in found}, samples, available)
    cells = park2019.cells(found, samples, datasets, settings.engine, how)
    val = park2019.val_samples(settings.scale, datasets)
    profiled = "profile" in get_provider(settings.cluster).options  # nodes of a profile
    profile = settings.profile
    if profiled and profile is None:
        profile = DEFAULT_PROFILE
    cluster = cluster_settings(settings.cluster, profile=profile, speedup=settings.speedup,
                               inventory=settings.inventory)
    catalog = load_catalog()
    seconds = estimate.grid_s(cells, cluster.speed, profile, catalog, val,
                              load_reference(), settings.speedup)
    notes = []
    floored = sorted({f"{m}{'-' + str(layers) if layers else ''} x {batch}"
                      for (m, layers, batch, _), n in samples.items()
                      if n > round(park2019.FULL_TRAIN[m] * settings.scale)})
    if floored:
        notes.append(f"raised to {park2019.MIN_STEPS} steps per worker on some device counts "
                     f"(so more samples than the scale): {', '.join(floored)}")
    if any(d == "synthetic" for d in datasets.values()):
        notes.append("accuracy on the synthetic set is not compared with the study's "
                     "(fetch MNIST and CIFAR-10 with `edgeprof data fetch`)")
    sweep = SweepSettings(
        cells=cells, out_dir=settings.out_dir, cluster=cluster,
        data_dir=settings.data_dir, timeout_s=settings.timeout_s, resume=settings.resume,
        interval_s=settings.interval_s, val_samples=val, ship_target=settings.ship_target,
        price=settings.price,
        extra={"study": "park2019", "scale": settings.scale, "method": how.name})
    check = settings.profile_check if profiled else "off"
    if check != "off" and profile in catalog.mixes:
        notes.append(f"{profile} is a mix of profiles: not checked on this host (check "
                     "each with `edgeprof sweep --profile NAME --profile-check refuse`)")
    elif check != "off":
        notes.append(f"first the profile {profile} is checked on this host ({check} if "
                     f"off by more than {settings.profile_tolerance:.0%}; a minute, a few "
                     "more if it re-calibrates)")
    return StudyPlan(sweep, samples, datasets, val, seconds, notes, how.name, check,
                     settings.profile_tolerance)


def run(study: StudyPlan, *, progress: bool = True,
        on_start: Callable[[Path], None] | None = None):
    """Check the profile, run the study's sweep, then write its report; returns
    (outcome, report path)."""
    from ..calibrate.check import check_sweep
    from ..report.build import build_report
    from ..sweep.sweep import run_sweep

    check_sweep(study.sweep, study.profile_check, study.profile_tolerance,
                report=_say if progress else None)
    outcome = run_sweep(study.sweep, progress=progress, on_start=on_start)
    return outcome, build_report(outcome.sweep_dir)



def _say(line: str) -> None:
    import click

    click.echo(f"profile check: {line}", err=True)
