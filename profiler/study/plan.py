"""A study's run, the same for every study: plan it, check the profile, run, report.

``plan`` turns a study's grid (``Study.grid``) and the settings every study takes
(cluster, scale, speedup, ...) into a sweep with its estimate, checking everything
first and touching nothing; ``run`` checks the emulated cluster's calibrated profile
on this host (``profiler.calibrate.check``: re-calibrated or refused when it drifted),
plans again on what the check measured (``replanned``: the budget, the dilations and the
window were chosen on the quotas before, and on the board's rate the node was assumed
to train at), runs that sweep like any other (resumable, every cell kept) and ends in
its report, whose study section the study writes (``Study.section``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from ..cell import DEFAULT_ENGINE, CellConfig
from ..errors import DataError
from ..cluster.profiles import MAX_SPEEDUP
from . import budget, estimate
from .base import Study
from .dilate import dilated_alike, neutral_notes
from .pace import Paces, measured, pace_notes
from .window import raised_notes, windowed


@dataclass
class StudySettings:
    """What every study takes; ``options`` holds the study's own (``Study.options``,
    parsed by ``Study.parse``)."""

    scale: float = 1.0
    options: dict = field(default_factory=dict)
    cluster: str = "emulated"  # a provider of profiler.cluster.PROVIDERS
    # Its options by name (ProviderOption); on nodes of a profile, the study's profile
    # unless "profile" is given.
    cluster_options: dict = field(default_factory=dict)
    engine: str = DEFAULT_ENGINE
    profile_check: str = "recalibrate"  # calibrate.check.MODES (node profiles only)
    # calibrate.check.CHECK_TOLERANCE (not imported: calibration loads the sweep;
    # tests/unit/test_profile_check.py holds them equal)
    profile_tolerance: float = 0.10
    data_dir: Path | None = None
    out_dir: Path | None = None
    resume: bool = False
    timeout_s: float | None = None
    interval_s: float | None = 1.0
    ship_target: object | None = None
    price: object | None = None  # --price: profiler.cluster.prices.PriceSpec
    # Runs of every cell (--repeats), interleaved; None: 1, or on --resume the sweep's own.
    repeats: int | None = None
    # --budget, seconds: the scale per part chosen to fit (budget.py); None: ``scale``.
    budget_s: float | None = None
    # Seconds the profile check took, when planning again after it (``replanned``): the
    # budget keeps them instead of budget.CHECK_S, and the plan no longer announces it.
    check_spent_s: float | None = None
    # The pace the profile check measured per (model family, dilation k), when planning
    # again after it (``replanned``, pace.py): the estimate and the window train the
    # nodes at it instead of the board's rate alone.
    measured_paces: Paces | None = None


@dataclass
class StudyPlan:
    study: Study
    sweep: object  # profiler.sweep.sweep.SweepSettings
    grid: object  # base.Grid
    estimate_s: float
    notes: list[str] = field(default_factory=list)
    profile_check: str = "off"
    profile_tolerance: float = 0.10
    # What it was planned from: ``run`` plans again from it after a re-calibration.
    settings: StudySettings | None = None
    # A cell's estimated seconds (``estimate.cell_s`` at the plan's rates): ``run``
    # keeps ``--budget`` with it (budget.Keeper).
    cell_s: Callable[[CellConfig], float] | None = None

    def describe(self) -> str:
        """What will run, in a few lines (printed before the study starts)."""
        grid = self.grid
        by_model: dict[str, list[int]] = {}
        for cell in grid.cells:  # as run: window.py may have raised the grid's samples
            by_model.setdefault(cell.model, []).append(cell.max_samples or 0)
        data = "".join(
            f"; {model} on {grid.datasets.get(model, '?')}, "
            + (f"{min(ns):,}" if min(ns) == max(ns) else f"{min(ns):,}-{max(ns):,}")
            + " training samples a cell" for model, ns in by_model.items())
        label = f" ({grid.label})" if grid.label else ""
        lines = [f"study {self.study.name}{label}: {len(self.sweep.cells)} cells on the "
                 f"{self.sweep.cluster.label}{data}; {grid.val_samples:,} validation samples",
                 f"estimated time: about {estimate.shown(self.estimate_s)}"]
        return "\n".join(lines + grid.notes + self.notes)


def plan(study: Study, settings: StudySettings) -> StudyPlan:
    """Check the settings and build the sweep; nothing is started or written."""
    from workloads.datasets.resolver import verify

    from ..cluster import cluster_settings, get_provider
    from ..cluster.profiles import load_catalog
    from ..sweep.sweep import SweepSettings

    available = set()
    for name in study.datasets_wanted():
        try:
            verify(name, settings.data_dir)
            available.add(name)
        except DataError:
            pass
    repeats = _repeats(settings)
    options = dict(settings.cluster_options)
    if get_provider(settings.cluster).speed == "profile" and options.get("profile") is None:
        options["profile"] = study.profile  # nodes of a profile: the study's
        if settings.budget_s is not None and options.get("speedup") is None:
            options["speedup"] = MAX_SPEEDUP  # --budget: dilated as far as each cell can
    cluster = cluster_settings(settings.cluster, **options)
    profile = cluster.node_profile
    catalog = load_catalog()

    paces = settings.measured_paces or None

    def rate(cell) -> float:
        """At the pace the profile check measured, when it ran (pace.py)."""
        return estimate.node_rate(study, cell, cluster.speed, profile, catalog,
                                  cluster.max_speedup, paces)

    def assumed(cell) -> float:
        """At the board's rate the profile was calibrated to."""
        return estimate.node_rate(study, cell, cluster.speed, profile, catalog,
                                  cluster.max_speedup)

    def timed(cells: list) -> list:
        """The cells one ratio compares at one speedup, each short one given the
        training time a timed ratio needs (window.py: at the measured pace, never less
        than the board's rate gives)."""
        alike = dilated_alike(study, cells, cluster.speed, profile, catalog,
                              cluster.max_speedup)
        return windowed(study, alike, rate, assumed if paces else None)

    def grid_s(grid) -> float:
        return estimate.grid_s(study, repeated(timed(grid.cells), repeats), cluster.speed,
                               profile, catalog, grid.val_samples, cluster.max_speedup,
                               paces)

    parsed, scale = study.parse(settings.options), settings.scale
    if settings.budget_s is None:
        grid = study.grid(scale, parsed, settings.engine, available)
    else:
        checked = profile and settings.profile_check != "off" and profile not in catalog.mixes
        reserved_s = settings.check_spent_s if settings.check_spent_s is not None else \
            budget.CHECK_S if checked else 0.0
        grid, _, scale = budget.grid_within(study, parsed, settings.engine, available,
                                            settings.budget_s, grid_s, reserved_s)
    seconds = grid_s(grid)
    built, grid.cells = grid.cells, timed(grid.cells)
    grid.notes += raised_notes(built, grid.cells) + neutral_notes(
        study, grid.cells, cluster.speed, cluster.max_speedup)
    grid.cells = repeated(grid.cells, repeats)
    sweep = SweepSettings(
        cells=grid.cells, out_dir=settings.out_dir, cluster=cluster,
        data_dir=settings.data_dir, timeout_s=settings.timeout_s, resume=settings.resume,
        interval_s=settings.interval_s, val_samples=grid.val_samples,
        ship_target=settings.ship_target, price=settings.price,
        extra={"study": study.name, "scale": scale, **grid.recorded,
               **({"repeats": repeats} if repeats > 1 else {})})
    notes = [f"each cell runs {repeats} times, interleaved (all cells, then all again); "
             "each ratio is judged on its median over the repeats"] if repeats > 1 else []
    check = settings.profile_check if profile else "off"
    if check != "off" and profile in catalog.mixes:
        notes.append(f"{profile} is a mix of profiles: not checked on this host (check "
                     "each with `edgeprof sweep --profile NAME --profile-check refuse`)")
    elif check != "off" and settings.check_spent_s is None:
        notes.append(f"first the profile {profile} is checked on this host ({check} if "
                     f"off by more than {settings.profile_tolerance:.0%}; then its link, "
                     "with a step's exchange between two nodes; a minute, a few more if it "
                     "re-calibrates)")
    notes += pace_notes(paces)
    return StudyPlan(study, sweep, grid, seconds, notes, check, settings.profile_tolerance,
                     settings, lambda cell: estimate.cell_s(study, cell, rate(cell),
                                                            grid.val_samples))


def replanned(study_plan: StudyPlan, check_spent_s: float) -> StudyPlan | None:
    """The study planned again on what its profile check measured and re-calibrated
    (recorded in ``sweep.extra["profile_check"]``), or None when it measured nothing.

    The first plan chose the scale per part (``--budget``), each cell's dilation and the
    samples that give a short cell its window from the quotas in the profile file then,
    taking each node to train at its board's rate. A re-calibration on a slower host
    raises the quotas (on this project's slower host, LeNet-MLP's quota from 0.061 to
    0.111 cores), so that plan would overrun its budget; and a node the check measured
    off its board's rate, even within the tolerance, trains every cell off by as much:
    on a fast host a cell raised to the 2.5 s window trained 1.73 s. So the new plan is
    made on the quotas the checks wrote and at the pace they measured (pace.py:
    ``StudySettings.measured_paces``). The checks are kept; a budget keeps the
    ``check_spent_s`` the check took in place of the share it reserved.
    """
    checks = study_plan.sweep.extra.get("profile_check") or []
    paces = measured(checks)
    if study_plan.settings is None or \
            not (paces or any(c.get("action") == "recalibrated" for c in checks)):
        return None
    again = plan(study_plan.study, replace(study_plan.settings, check_spent_s=check_spent_s,
                                           measured_paces=paces or None))
    again.sweep.extra["profile_check"] = checks
    return again


def repeated(cells: list, repeats: int) -> list:
    """Every cell ``repeats`` times, interleaved (all cells once, then all again): the
    host's drift over the run hits every configuration alike, not its last repeats."""
    return [replace(c, repeat=k) for k in range(repeats) for c in cells]


def _repeats(settings: StudySettings) -> int:
    """--repeats as given, else 1; on --resume the sweep's own (sweep.json), and a
    different count is refused: the recorded one says how its ratios are grouped."""
    from ..errors import ConfigError
    from ..sweep.folder import read_sweep_meta

    given = settings.repeats
    if given is not None and given < 1:
        raise ConfigError(f"--repeats {given} must be 1 or more")
    recorded = None
    if settings.resume and settings.out_dir and (Path(settings.out_dir) / "sweep.json").exists():
        recorded = (read_sweep_meta(settings.out_dir).get("extra") or {}).get("repeats", 1)
    if given is not None and recorded is not None and given != recorded:
        raise ConfigError(f"--resume: --repeats {given} differs from the sweep's {recorded}: "
                          f"resume with --repeats {recorded}, or start a new sweep with "
                          "another --out")
    return given or recorded or 1


def run(study_plan: StudyPlan, *, progress: bool = True,
        on_start: Callable[[Path], None] | None = None):
    """Check the profile, plan again on what it measured (``replanned``), run the study's
    sweep, then write its report with the study's section; returns (outcome, report
    path)."""
    from ..calibrate.check import check_sweep
    from ..predict import report_section  # noqa: F401  offers the report its prediction
    from ..report.build import build_report
    from ..sweep.preflight import preflight
    from ..sweep.sweep import run_sweep

    started_s = time.monotonic()
    # A plan made on what the check measured may take in a part (so a model family) the
    # first plan left out, whose quotas nobody measured (a budgeted run that added
    # Table 4's ResNet after checking LeNet-MLP only): those are checked in turn.
    for _ in range(MAX_CHECK_ROUNDS):
        if not _check_unchecked(study_plan, check_sweep, _say if progress else None):
            break
        again = replanned(study_plan, time.monotonic() - started_s)
        if again is None:
            break
        preflight(again.sweep)
        if progress:
            checks = again.sweep.extra.get("profile_check") or []
            why = "re-calibrated, so planned again on the new quotas:" \
                if any(c.get("action") == "recalibrated" for c in checks) else \
                "planned again on the pace measured:"
            _say(why + "\n" + again.describe())
        study_plan = again
    keeper = _keeper(study_plan, started_s)
    outcome = run_sweep(study_plan.sweep, progress=progress, on_start=on_start,
                        on_record=keeper.observe if keeper else None)
    if outcome.held_back and progress:
        _say_sweep(f"{outcome.held_back} cell{'s' if outcome.held_back > 1 else ''} not "
                   f"run: {outcome.held_reason}; `--resume --out {outcome.sweep_dir}` runs "
                   "them")
    return outcome, build_report(outcome.sweep_dir, study_section=study_plan.study.section)


# Check, plan again, check the families the new plan took in: a plan adds families only
# while the budget has room, so two rounds are what a study of three families needs.
MAX_CHECK_ROUNDS = 3


def _check_unchecked(study_plan: StudyPlan, check_sweep, report) -> bool:
    """Check the profile for the plan's model families no check measured yet (all of
    them the first time), adding their records to ``profile_check``; whether any was
    measured."""
    sweep = study_plan.sweep
    before = list(sweep.extra.get("profile_check") or [])
    checked = {c["model"] for c in before}
    cells = [c for c in sweep.cells if c.model not in checked]
    if not cells:
        return False
    part = replace(sweep, cells=cells, extra={})
    check_sweep(part, study_plan.profile_check, study_plan.profile_tolerance, report=report)
    measured = part.extra.get("profile_check") or []
    if measured:  # nothing checked (off, no profile, resumed): sweep.json as before
        sweep.extra["profile_check"] = before + measured
    return bool(measured)


def _say(line: str) -> None:
    import click

    click.echo(f"profile check: {line}", err=True)


def _keeper(study_plan: StudyPlan, started_s: float) -> "budget.Keeper | None":
    """``--budget`` kept at run time (budget.Keeper), from when the study started (its
    profile check is in the budget); None without a budget."""
    settings = study_plan.settings
    if settings is None or settings.budget_s is None or study_plan.cell_s is None:
        return None
    keeper = budget.Keeper(started_s + settings.budget_s * budget.OVERRUN, study_plan.cell_s)
    study_plan.sweep.may_start = keeper
    return keeper


def _say_sweep(line: str) -> None:
    import click

    click.echo(f"study: {line}", err=True)
