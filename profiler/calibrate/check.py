"""Does a calibrated profile still train at its board's rate on this host?

A profile's CPU quotas were found on one host (``edgeprof cluster calibrate``); the rate
a quota buys depends on the host's cores and on how busy they are. On another host the
shipped ``pi3b-park2019`` trained LeNet-MLP at 1.5-2.3 x the study's rate: every ratio
with one device as its denominator was then off by that factor. So before a study (and
on request before any sweep on the emulated cluster) every quota the grid's cells will
train at is measured once, as the calibration measures it (a one-device cell on a
one-node cluster, steady rate): each model family with a board rate (``board_rates``
in the profile), at each time dilation its cells will get (``profiles.dilation``: with
``--speedup`` a one-device cell and a ten-device one get different quotas). The ratio
to k times the board's rate must lie within x/÷(1 + tolerance).

When it does not, ``refuse`` stops with one line naming the drift and the command
that fixes it; ``recalibrate`` searches that quota again (as ``calibrate`` does,
starting from the check's measurement), writes the profile to the user's profiles file
(``~/.config/edgeprof/profiles.yaml``, which overrides the shipped one of the same
name), looks again at which dilations the cells now get (a smaller quota can let a
bigger cell dilate further) and goes on. The checks are returned for the sweep to
record (``sweep.json``, ``profile_check``) and the report to name.

Then the profile's link (exchange.py): a step's exchange of each family whose cells use
two nodes or more, probed between two nodes at the dilations those cells get, against
what the link rate predicts; off, ``refuse`` stops, ``recalibrate`` warns (a link has no
quota to re-calibrate). Its records follow the compute checks' (``"check": "exchange"``).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

from ..cluster.profiles import MAX_NODE_CORES, Profile, dilation, load_catalog
from ..errors import ConfigError
from . import (NotSettled, Workload, _Measurer, _refuse_a_running_cluster, _search,
               measured_more)
from .exchange import ExchangeCheck, check_exchanges
from .profiles_file import write_user_profile
from .result import Measurement

MODES = ("off", "refuse", "recalibrate")
# Within x/÷(1 + tolerance) of the board's rate. The study's tables are judged on a band
# of x/÷1.25 (report/ratios.py) and every N/1 ratio moves by the factor its one-device
# cell is off: a check as wide as the band passed a quota that put Table 1's 5/1 at 2.85
# (the check: 0.87 x the board; the cell trained at 0.84 x) against 3.48-3.53 in two runs
# checked at 1.20 and 1.01 x (issue 47). At 10% a one-device cell the check passes moves
# a ratio by 1.10 x at most, under half the band in log terms (ln 1.1 / ln 1.25 = 0.43),
# and leaves the rest to the run's own noise (repeats within 5%).
CHECK_TOLERANCE = 0.10
# A check measurement trains as long as a study cell's timed window (CHECK_TRAIN_S at
# the target rate) and at least this many steps, the first (its one-off set-up) left out
# of the rate: a study's one-device cells of about 30 steps repeat within 5% in one run.
# Before, it was the calibration's sizing (6 steps, or 8 s at the target rate when that
# was more), and a re-calibration on this host (issue 47) measured 0.0458 cores at 0.81 x,
# 0.0513 at 0.66 x, 0.0562 at 1.25 x and 0.0541 at 1.05 x: a larger quota slower by more
# than that noise (``_search`` now measures such a quota twice). At 20 steps a slow
# model pays for it: ResNet-32 at its board's 2.5 samples/s trains 256 s a check at
# speedup 1, 16 s at speedup 16.
CHECK_STEPS = 20
# Seconds of training at the target rate: report.ratios.MIN_WINDOW_S, the shortest window
# a timed ratio is judged on (calibrate may not import report: .importlinter's layers;
# tests/unit/test_profile_check.py holds them equal). A fast model's check is capped
# by the synthetic set's 6,000 samples (LeNet-MLP at speedup 8: 1.3 s), as a study's
# cells are by their dataset's (study/window.py).
CHECK_TRAIN_S = 2.5
# Re-calibration stops within this of the board's rate: half the check's tolerance, so
# that the quota found still passes the next check on the same host after a
# measurement's few % of noise. If five quotas do not get there, the closest is taken
# when it lies within the check's own tolerance.
RECALIBRATE_TOLERANCE = 0.05
# A first measurement off the board's rate is confirmed before the profile is changed:
# this many at its quota in all, their median taken. One measurement is not the host:
# on a quiet host (issue 47, 2026-11-29) a check measured LeNet-MLP at 1.61 x the board
# at 0.0949 cores and re-calibrated it to 0.0751 (0.87 x); the next run's check measured
# the same quota at 1.02 x, and the study's one-device cells at 0.0751 trained at
# 0.65-0.94 x. A median of three outlasts one such measurement.
CONFIRM_MEASUREMENTS = 3


def within(ratio: float, tolerance: float) -> bool:
    """``ratio`` lies within x/÷(1 + ``tolerance``) of 1."""
    return 1 / (1 + tolerance) <= ratio <= 1 + tolerance


@dataclass
class Check:
    """One model family's measurement against its board's rate."""

    profile: str
    model: str
    workload: str
    speedup: float
    quota_cores: float
    board_samples_per_s: float
    samples_per_s: float
    tolerance: float
    train_s: float | None = None  # how long the check's measurement trained
    action: str = "none"  # none, or recalibrated
    new_quota_cores: float | None = None
    # The last search measurement's rate at new_quota_cores (samples/s): what the node
    # trains at after the re-calibration, which a study plans on (study/pace.py).
    new_samples_per_s: float | None = None

    @property
    def ratio(self) -> float:
        return self.samples_per_s / (self.board_samples_per_s * self.speedup)

    @property
    def within(self) -> bool:
        return within(self.ratio, self.tolerance)

    def as_record(self) -> dict:
        train_s = None if self.train_s is None else round(self.train_s, 3)
        return {**asdict(self), "train_s": train_s, "ratio": round(self.ratio, 4),
                "within": self.within}

    def line(self) -> str:
        at = f" at speedup {self.speedup:g}" if self.speedup != 1 else ""
        return (f"{self.profile}: {self.workload} trains at {self.samples_per_s:.1f} "
                f"samples/s{at} on this host, {self.ratio:.2f} x the board's "
                f"{self.board_samples_per_s * self.speedup:g} (quota {self.quota_cores:.4f} "
                f"cores; tolerance x/÷{1 + self.tolerance:g})")


def dilations_used(profile: Profile, cells, speedup: float, host_cores: float
                   ) -> set[tuple[str, float]]:
    """``(model family, k)`` for every dilation k the ``cells`` will get on nodes of
    ``profile`` (what ``EmulatedCluster.prepare`` chooses: ``profiles.dilation``)."""
    from ..engines import get_engine

    used = set()
    for cell in cells:
        nodes = get_engine(cell.engine).nodes_needed(cell)
        options = {k: [profile.cpu_cores_for(cell.model, k)] * nodes
                   for k in profile.speedups(cell.model)}
        used.add((cell.model, dilation(options, host_cores, cell.speedup_within(speedup))))
    return used


def check_profile(profile_name: str, cells, *, mode: str = "refuse",
                  speedup: float = 1.0, tolerance: float = CHECK_TOLERANCE,
                  to_file: Path | None = None,
                  report: Callable[[str], None] = lambda line: None) -> list[Check]:
    """Measure every quota the ``cells`` will train at (each model family with a board
    rate, at each dilation its cells get); see the module doc. Raises ``ConfigError``
    (one line) with ``mode="refuse"`` on drift."""
    if mode not in MODES[1:]:
        raise ConfigError(f"--profile-check {mode!r}: use refuse or recalibrate here")
    if not 0 < tolerance < 1:
        raise ConfigError(f"--profile-tolerance {tolerance}: give a fraction such as 0.1")
    catalog = load_catalog()
    if profile_name in catalog.mixes:
        report(f"{profile_name} is a mix: its profiles are not checked (check one with "
               "`edgeprof sweep --cluster emulated --profile NAME --profile-check refuse`)")
        return []
    if profile_name not in catalog.profiles:
        return []  # a profile of no board: nothing to check against
    profile = catalog.profiles[profile_name]
    models = {c.model for c in cells}
    if not models & set(profile.board_rates):
        report(f"{profile_name} has no board rate for {', '.join(sorted(models))}: not "
               "checked (calibrate it with `edgeprof cluster calibrate`)")
        return []
    _refuse_a_running_cluster()
    host_cores = float(len(os.sched_getaffinity(0)))
    checks: list[Check] = []
    done: set[tuple[str, float]] = set()
    with tempfile.TemporaryDirectory(prefix="edgeprof-profile-check-") as tmp:
        measure = _Measurer(Path(tmp), profile, steps=CHECK_STEPS, train_s=CHECK_TRAIN_S)
        while True:
            # A re-calibrated quota can change the dilation a cell gets: look again.
            todo = sorted((m, k) for m, k in dilations_used(profile, cells, speedup,
                                                             host_cores)
                          if m in profile.board_rates and (m, k) not in done)
            if not todo:
                return checks
            model, k = todo[0]
            done.add((model, k))
            check, profile = _check_one(profile, model, k, measure, mode, tolerance,
                                        to_file, report)
            checks.append(check)
            measure.base = profile


def _check_one(profile: Profile, model: str, k: float, measure, mode: str,
               tolerance: float, to_file: Path | None, report: Callable[[str], None]
               ) -> tuple[Check, Profile]:
    """Measure ``model``'s quota at dilation ``k``; re-calibrate it (a new profile) or
    refuse when it is off."""
    rate = profile.board_rates[model]
    quota = profile.cpu_cores_for(model, k)
    workload = Workload(rate.model, rate.layers, rate.batch)
    target = rate.samples_per_s * k
    step = measure(workload, quota, target)
    if not within(step.samples_per_s / target, tolerance):
        report(f"{workload.label}: {step.samples_per_s / target:.2f} x the board at "
               f"{quota:.4f} cores; measured {CONFIRM_MEASUREMENTS - 1} more times to "
               "confirm (their median is the check's)")
        step, _ = measured_more(step, CONFIRM_MEASUREMENTS - 1, measure, workload, target,
                                report)
    check = Check(profile.name, model, workload.label, k, quota, rate.samples_per_s,
                  step.samples_per_s, tolerance, train_s=step.train_s)
    report(("ok: " if check.within else "off: ") + check.line())
    if check.within:
        return check, profile
    if mode == "refuse":
        raise ConfigError(
            f"{check.line()}: re-calibrate it for this host with --profile-check "
            f"recalibrate, or `sudo edgeprof cluster calibrate --profile {profile.name} "
            f"--model-quota --workload {rate.workload} --batch {rate.batch} "
            f"--samples-per-s {rate.samples_per_s:g}" + (f" --dilations {k:g}" if k != 1
                                                        else "") + "`")
    found = _recalibrate(measure, workload, rate.samples_per_s * k, quota, step,
                         tolerance, report)
    new_quota = found.quota_cores
    check.action, check.new_quota_cores = "recalibrated", new_quota
    check.new_samples_per_s = found.samples_per_s
    profile = with_quota(profile, model, k, new_quota)
    path = write_user_profile(profile, to_file)
    report(f"{profile.name}: {model} at speedup {k:g}: {quota:.4f} -> {new_quota:.4f} "
           f"cores, written to {path}")
    return check, profile


def check_sweep(sweep, mode: str, tolerance: float = CHECK_TOLERANCE,
                report: Callable[[str], None] | None = None) -> None:
    """Check the node profile ``sweep``'s nodes are made from for its models and keep the
    result in ``sweep.extra["profile_check"]`` (sweep.json; the report names it). Nothing
    to do on nodes of no named profile, or on a resumed sweep (checked when it started)."""
    profile = sweep.cluster.node_profile
    if mode == "off" or sweep.resume or profile is None:
        return
    say = report or (lambda line: None)
    checks = check_profile(profile, sweep.cells, mode=mode,
                           speedup=sweep.cluster.max_speedup, tolerance=tolerance, report=say)
    records = [c.as_record() for c in checks]
    if checks:  # a profile with board rates: its link too (exchange.py)
        records += [c.as_record() for c in check_links(profile, sweep.cells, mode,
                                                       sweep.cluster.max_speedup, say)]
    sweep.extra["profile_check"] = records


def exchanges_used(profile: Profile, cells, speedup: float, host_cores: float
                   ) -> list[tuple[str, int | None, str, float]]:
    """``(model family, layers, label, k)`` for every dilation k the multi-node ``cells``
    of a family with a board rate get, at the family's deepest model among them (the
    most bytes a step: the exchange most exposed to the link)."""
    from ..engines import get_engine

    several = [c for c in cells if get_engine(c.engine).nodes_needed(c) > 1
               and c.model in profile.board_rates]
    deepest: dict[str, int | None] = {}
    for cell in several:
        deepest[cell.model] = max(cell.layers or 0, deepest.get(cell.model) or 0) or None
    used = dilations_used(profile, several, speedup, host_cores)
    return [(model, deepest[model], model + (f"-{deepest[model]}" if deepest[model] else ""),
             k) for model, k in sorted(used)]


def check_links(profile_name: str, cells, mode: str, speedup: float,
                report: Callable[[str], None]) -> list[ExchangeCheck]:
    """The exchange check (exchange.py) of ``profile_name``'s link for ``cells``, on the
    profile as the compute check left it (re-calibrated quotas included)."""
    profile = load_catalog().profiles[profile_name]
    todo = exchanges_used(profile, cells, speedup, float(len(os.sched_getaffinity(0))))
    with tempfile.TemporaryDirectory(prefix="edgeprof-exchange-check-") as tmp:
        return check_exchanges(profile, todo, mode=mode, work=Path(tmp), report=report)


def _recalibrate(measure, workload: Workload, target: float, quota: float, first,
                 tolerance: float, report: Callable[[str], None]) -> Measurement:
    """The measurement at the quota at which ``workload`` trains at ``target``
    (``calibrate._search``): its quota and the rate measured there."""
    try:
        return _search(measure, workload, target, quota, RECALIBRATE_TOLERANCE, report,
                       first=first)[-1]
    except NotSettled as exc:
        best = min(exc.steps, key=lambda s: abs(s.samples_per_s / target - 1))
        ratio = best.samples_per_s / target
        # On a busy host the rate at one quota wanders by 16% (a study run beside the
        # test suite: 0.83 and 0.97 x at 0.1084 cores, and the closest of five quotas
        # 0.90 x): a study is not thrown away for that; a quota off by more than twice
        # the tolerance is, as it would move every ratio by more than the band allows.
        if not within(ratio, 2 * tolerance):
            raise
        outside = "" if within(ratio, tolerance) else \
            f", outside the check's x/÷{1 + tolerance:g}"
        report(f"{workload.label}: not within {RECALIBRATE_TOLERANCE:.0%} in "
               f"{len(exc.steps)} quotas ({exc.why}); the closest, {best.quota_cores:.4f} "
               f"cores ({ratio:.2f} x{outside}), is taken")
        return best


def with_quota(profile: Profile, model: str, speedup: float, quota: float) -> Profile:
    """``profile`` with ``model``'s quota at dilation ``speedup`` set to ``quota``."""
    if speedup == 1:
        return replace(profile, cpu_cores_by_model={**profile.cpu_cores_by_model,
                                                    model: round(quota, 5)})
    dilated = {m: dict(v) for m, v in profile.cpu_cores_dilated.items()}
    dilated.setdefault(model, {})[float(speedup)] = round(min(quota, MAX_NODE_CORES), 5)
    return replace(profile, cpu_cores_dilated=dilated)
