"""Does a calibrated profile still train at its board's rate on this host?

A profile's CPU quotas were found on one host (``edgeprof cluster calibrate``); the rate
a quota buys depends on the host's cores and on how busy they are. On another host the
shipped ``pi3b-park2019`` trained LeNet-MLP at 1.5-2.2 x the study's rate: every ratio
with one device as its denominator was then off by that factor. So before a study (and
on request before any sweep on the emulated cluster) each model family of the grid is
measured once, as the calibration measures it (a one-device cell on a one-node
cluster, steady rate), at the quota its one-device cells will get: at the time dilation
the profile has for it up to ``--speedup`` (what ``profiles.dilation`` gives a one-node
cell; the dilations of bigger cells are not checked). The ratio to the board's rate
(``board_rates`` in the profile) must lie within the tolerance.

When it does not, ``refuse`` stops with one line naming the drift and the command
that fixes it; ``recalibrate`` searches the quota at that dilation again (as
``calibrate`` does) and multiplies every quota of the family, undilated and dilated,
by the same factor (the host's speed changed, not the shape of the curve: approximate
for the dilations not measured), writes the profile to the user's profiles file
(``~/.config/edgeprof/profiles.yaml``, which overrides the shipped one of the same name)
and goes on. The checks are returned for the sweep to record (``sweep.json``,
``profile_check``) and the report to name.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import yaml

from ..cluster.profiles import (MAX_NODE_CORES, USER_PROFILES, Profile, dilation,
                                load_catalog)
from ..errors import ConfigError
from ..fsutil import atomic_write_text
from . import NotSettled, Workload, _Measurer, _refuse_a_running_cluster, _search

MODES = ("off", "refuse", "recalibrate")
# Within x/÷(1 + tolerance) of the board's rate: 1.25 is the band of the study's tables
# (report/ratios.py), and one short measurement at a few hundredths of a core wanders
# by 10-20% on this kind of host (calibrating lenet-example: 52.9 and 68.1 samples/s at
# the same 0.0295 cores).
CHECK_TOLERANCE = 0.25
CHECK_STEPS = 6  # steps per check measurement (the first is left out of the rate)
# Re-calibration stops within this of the board's rate; if five measurements do not get
# there, the closest is taken when it lies within the check's own tolerance.
RECALIBRATE_TOLERANCE = 0.08


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
    action: str = "none"  # none, refused, recalibrated
    new_quota_cores: float | None = None

    @property
    def ratio(self) -> float:
        return self.samples_per_s / (self.board_samples_per_s * self.speedup)

    @property
    def within(self) -> bool:
        return 1 / (1 + self.tolerance) <= self.ratio <= 1 + self.tolerance

    def as_record(self) -> dict:
        return {**asdict(self), "ratio": round(self.ratio, 4), "within": self.within}

    def line(self) -> str:
        at = f" at speedup {self.speedup:g}" if self.speedup != 1 else ""
        return (f"{self.profile}: {self.workload} trains at {self.samples_per_s:.1f} "
                f"samples/s{at} on this host, {self.ratio:.2f} x the board's "
                f"{self.board_samples_per_s * self.speedup:g} (quota {self.quota_cores:.4f} "
                f"cores; tolerance x/÷{1 + self.tolerance:g})")


def families(models: set[str]) -> list[str]:
    """The model families (profile keys) of the grid's models, in a stable order."""
    return sorted(models)


def check_profile(profile_name: str, models: set[str], *, mode: str = "refuse",
                  speedup: float = 1.0, tolerance: float = CHECK_TOLERANCE,
                  to_file: Path | None = None,
                  report: Callable[[str], None] = lambda line: None) -> list[Check]:
    """Measure each family of ``models`` the profile has a board rate for; see the module
    doc. Raises ``ConfigError`` (one line) with ``mode="refuse"`` on drift."""
    if mode not in MODES:
        raise ConfigError(f"--profile-check {mode!r}: use one of {', '.join(MODES)}")
    if mode == "off":
        return []
    if not 0 < tolerance < 1:
        raise ConfigError(f"--profile-tolerance {tolerance}: give a fraction such as 0.25")
    catalog = load_catalog()
    if profile_name not in catalog.profiles:
        return []  # a mix, or a profile of no board: nothing to check against
    profile = catalog.profiles[profile_name]
    wanted = [m for m in families(models) if m in profile.board_rates]
    if not wanted:
        report(f"{profile_name} has no board rate for {', '.join(sorted(models))}: not "
               "checked (calibrate it with `edgeprof cluster calibrate`)")
        return []
    _refuse_a_running_cluster()
    checks: list[Check] = []
    with tempfile.TemporaryDirectory(prefix="edgeprof-profile-check-") as tmp:
        measure = _Measurer(Path(tmp), profile, steps=CHECK_STEPS)
        for model in wanted:
            rate = profile.board_rates[model]
            k = _one_node_speedup(profile, model, speedup)
            quota = profile.cpu_cores_for(model, k)
            workload = Workload(rate.model, rate.layers, rate.batch)
            step = measure(workload, quota, rate.samples_per_s * k)
            check = Check(profile_name, model, workload.label, k, quota, rate.samples_per_s,
                          step.samples_per_s, tolerance)
            checks.append(check)
            report(("ok: " if check.within else "off: ") + check.line())
            if check.within:
                continue
            if mode == "refuse":
                check.action = "refused"
                raise ConfigError(
                    f"{check.line()}: re-calibrate it for this host with --profile-check "
                    f"recalibrate, or `sudo edgeprof cluster calibrate --profile "
                    f"{profile_name} --model-quota --workload {rate.workload} --batch "
                    f"{rate.batch} --samples-per-s {rate.samples_per_s:g}`")
            new_quota = _recalibrate(measure, workload, rate.samples_per_s * k, quota, step,
                                     tolerance, report)
            check.action, check.new_quota_cores = "recalibrated", new_quota
            profile = scaled(profile, model, new_quota / quota)
            path = write_user_profile(profile, to_file)
            report(f"{profile_name}: {model}'s quotas x {new_quota / quota:.3f} "
                   f"({quota:.4f} -> {new_quota:.4f} cores at speedup {k:g}), "
                   f"written to {path}")
            measure.base = profile
    return checks


def check_sweep(sweep, mode: str, tolerance: float = CHECK_TOLERANCE,
                report: Callable[[str], None] | None = None) -> None:
    """Check ``sweep``'s emulated profile for its models and keep the result in
    ``sweep.extra["profile_check"]`` (sweep.json; the report names it). Nothing to do off
    the emulated cluster, or on a resumed sweep (checked when it started)."""
    if mode == "off" or sweep.cluster != "emulated" or sweep.resume or not sweep.profile:
        return
    checks = check_profile(sweep.profile, {c.model for c in sweep.cells}, mode=mode,
                           speedup=sweep.speedup, tolerance=tolerance,
                           report=report or (lambda line: None))
    sweep.extra["profile_check"] = [c.as_record() for c in checks]


def _recalibrate(measure, workload: Workload, target: float, quota: float, first,
                 tolerance: float, report: Callable[[str], None]) -> float:
    """The quota at which ``workload`` trains at ``target`` (``calibrate._search``)."""
    try:
        return _search(measure, workload, target, quota, RECALIBRATE_TOLERANCE, report,
                       first=first)[-1].quota_cores
    except NotSettled as exc:
        best = min(exc.steps, key=lambda s: abs(s.samples_per_s / target - 1))
        ratio = best.samples_per_s / target
        if not 1 / (1 + tolerance) <= ratio <= 1 + tolerance:
            raise
        report(f"{workload.label}: not within {RECALIBRATE_TOLERANCE:.0%} in "
               f"{len(exc.steps)} measurements; the closest, {best.quota_cores:.4f} cores "
               f"({ratio:.2f} x), is taken")
        return best.quota_cores


def _one_node_speedup(profile: Profile, model: str, speedup: float) -> float:
    """The dilation a one-device cell of ``model`` gets (``profiles.dilation``)."""
    options = {k: [profile.cpu_cores_for(model, k)] for k in profile.speedups(model)}
    return dilation(options, float(len(os.sched_getaffinity(0))), speedup)


def scaled(profile: Profile, model: str, factor: float) -> Profile:
    """``profile`` with every quota of ``model``'s family multiplied by ``factor``."""
    from dataclasses import replace

    by_model = {**profile.cpu_cores_by_model,
                model: round(profile.cpu_cores_for(model) * factor, 5)}
    dilated = dict(profile.cpu_cores_dilated)
    if model in dilated:
        dilated[model] = {k: round(min(q * factor, MAX_NODE_CORES), 5)
                          for k, q in dilated[model].items()}
    return replace(profile, cpu_cores_by_model=by_model, cpu_cores_dilated=dilated)


def write_user_profile(profile: Profile, path: Path | None = None) -> Path:
    """Write ``profile`` whole into the user's profiles file (replacing one of its name)."""
    path = Path(path or USER_PROFILES).expanduser()
    doc: dict = {}
    if path.exists():
        doc = yaml.safe_load(path.read_text()) or {}
        if not isinstance(doc, dict):
            raise ConfigError(f"{path} is not a profiles file (no mapping at the top): "
                              "move it away or fix it")
    doc.setdefault("profiles", {})[profile.name] = profile.as_spec()
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, yaml.safe_dump(doc, sort_keys=False))
    load_catalog()  # must read back (one line if not)
    return path
