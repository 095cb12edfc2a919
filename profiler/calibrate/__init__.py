"""Calibrate an emulated node's CPU quota to a real board's training rate.

A profile's ``cpu_cores`` is a guess from benchmark scores; what a study reports is how
fast a board *trains*. ``calibrate`` finds the quota at which one emulated node trains a
workload at a given rate (samples per second of training, steady: the first epoch
without its first step, whose one-off set-up a board's epoch of hundreds of steps hides;
not process start-up either, which the training roles pay outside the quota, see
``workloads.node_limits``), then measures a second workload at that quota and says how
far it lands from its own reference. A single-threaded training process uses a quota
below one core in proportion, so each step scales the quota by target / measured; it
stops when the rate is within the tolerance (a few steps). A quota measured slower than
a smaller one is noise, not the curve: it is measured once more and the median kept.

One quota cannot make every model train at the board's rate (the relative cost of
convolutions and dense layers differs between MXNet 1.9.1 on x86 and MXNet 0.9.5 on a
Cortex-A53: docs/emulated.md), so ``model_quota=True`` calibrates a quota for the
workload's model family alone and adds it to an existing profile's
``cpu_cores_by_model``; the emulated cluster applies it to that model's cells.

The measurement runs a real one-device cell (MXNet, KVStore ``local``) on a one-node
emulated cluster whose profile is the base profile with the candidate quota (a
``Profile`` object handed to the emulated provider's settings), through ``run_sweep``
like any sweep, with no metrics agent. Data is the synthetic set of the workload's
shape: the rate does not depend on the pixels. What is found is written by
``profiles_file``.
"""

from __future__ import annotations

import math
import os
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..cell import DEFAULT_ENGINE, CellConfig
from ..cluster import profiled_provider
from ..cluster.profiles import MAX_NODE_CORES, MAX_SPEEDUP, MIN_CPU_CORES, BoardRate, Profile
from ..errors import ClusterError, ConfigError
from ..status import Status
from ..sweep.grid import validate
from ..sweep.sweep import SweepSettings, run_sweep
from .profiles_file import named_base_profile, profile_to_extend
from .result import Calibration, Measurement

MEASURE_TRAIN_S = 8.0  # training seconds per measurement at the target rate
# Below this, a measurement is a few dozen CFS periods of 100 ms: too few for a quota.
MIN_MEASURE_S = 1.0
MEASURE_STEPS = 8  # and at least this many steps: the first pays MKL-DNN's set-up
MAX_STEPS = 5  # quotas tried; a quota measured twice (below) counts once
DEFAULT_TOLERANCE = 0.05
# The rate grows with the quota; a larger quota measured slower than a smaller one by
# more than this is noise, not the curve, and is measured once more. Repeats of a study's
# one-device cell (about 30 steps) agree within 5% in one run; a re-calibration on this
# host (issue 47) saw 0.0513 cores at 0.66 x the target after 0.0458 at 0.81 x (23%).
MONOTONIC_SLACK = 0.05
# A node's pace grows at most in proportion to its quota (log-log slope 1; less where
# memory or the host's own work takes a share). Two quotas whose rates grew more than
# twice as fast (slope above this) are one measurement off, not the curve: a check on
# a quiet host (issue 47) measured 1.61 x the board at 0.0949 cores, then 0.86-0.87 x
# at 0.0706, 0.0751 and 0.0787, and interpolated towards the 1.61 without getting near.
# The farther of the two from the target is measured twice more, and the median of
# the three taken (a median of two is their mean, which one outlier still moves).
MOST_SLOPE = 2.0
# ... and only where the two rates differ by more than repeats at one quota do (up to
# 23% seen, above): near the target the search tries quotas a few % apart, whose noise
# alone is a steep slope.
JUMP_RATIO = 1.3


@dataclass(frozen=True)
class Workload:
    """What is trained: one of the engine's models (``lenet-mlp``; with its depth where
    it has a depth rule: ``resnet-32``), the batch, and the engine that trains it (the
    board's rate was measured with that engine: ``edgeprof run --engine torch`` on the
    board)."""

    model: str
    layers: int | None
    batch: int
    engine: str = DEFAULT_ENGINE

    @classmethod
    def parse(cls, text: str, batch: int, engine: str = DEFAULT_ENGINE) -> "Workload":
        """``<model>``, or ``<model>-<layers>`` for a model with a depth rule."""
        from workloads.models import with_depth

        from ..engines import get_engine

        text = text.strip().lower()
        deep = [m for m in get_engine(engine).models if m in with_depth()]
        plain = [m for m in get_engine(engine).models if m not in deep]
        if text in plain:
            return cls(text, None, batch, engine)
        name, _, layers = text.rpartition("-")
        if name in deep and layers.isdigit():
            return cls(name, int(layers), batch, engine)
        choices = plain + [f"{m}-<layers>" for m in deep]
        raise ConfigError(f"unknown workload {text!r} for --engine {engine}: use "
                          f"{', '.join(choices)}")

    @property
    def label(self) -> str:
        name = self.model if self.layers is None else f"{self.model}-{self.layers}"
        engine = "" if self.engine == DEFAULT_ENGINE else f" ({self.engine})"
        return f"{name} batch {self.batch}{engine}"

    def cell(self, samples: int) -> CellConfig:
        return validate(CellConfig(engine=self.engine, model=self.model, layers=self.layers,
                                   batch=self.batch, devices=1, epochs=1,
                                   max_samples=samples, dataset="synthetic"))


def calibrate(profile: str, base: str, workload: Workload, target_samples_per_s: float, *,
              check: tuple[Workload, float] | None = None,
              tolerance: float = DEFAULT_TOLERANCE, model_quota: bool = False,
              to_file: Path | None = None, dilations: tuple[float, ...] = (),
              measure_s: float = MEASURE_TRAIN_S,
              report: Callable[[str], None] = lambda line: None) -> Calibration:
    """Find the quota; see the module docstring. ``report`` gets one line per step.

    ``model_quota``: calibrate the quota of ``workload``'s model family only, into the
    existing profile ``profile`` (read from ``to_file`` or the known profiles), whose
    link and memory are kept; ``base`` is then not used. ``dilations``: speedups k for
    which the quota of k times the rate is found too (``cpu_cores_dilated``), up to
    the first that would need more than one core. ``measure_s``: seconds of training
    per measurement at the rate expected.
    """
    if not measure_s >= MIN_MEASURE_S:
        raise ConfigError(f"--measure-s {measure_s:g}: give the seconds of training per "
                          f"measurement, at least {MIN_MEASURE_S:g}, e.g. 8")
    if any(not 1 < k <= MAX_SPEEDUP for k in dilations):
        raise ConfigError(f"--dilations {','.join(f'{k:g}' for k in dilations)}: give "
                          f"speedups above 1 and up to {MAX_SPEEDUP:g}, e.g. 2,4,8,16")
    if not target_samples_per_s > 0:
        raise ConfigError(f"--samples-per-s {target_samples_per_s}: give the board's "
                          "training rate, a number > 0")
    if model_quota:
        base, base_profile = profile, profile_to_extend(profile, to_file)
    else:
        base_profile = named_base_profile(base)
    _refuse_a_running_cluster()
    start = base_profile.cpu_cores_for(workload.model) if model_quota else base_profile.cpu_cores
    result = Calibration(profile=profile, base=base, workload=workload.label,
                         target_samples_per_s=target_samples_per_s,
                         quota_cores=start, samples_per_s=0.0,
                         model=workload.model if model_quota else None,
                         board_rate=BoardRate(workload.model, workload.layers,
                                              workload.batch, target_samples_per_s))
    with tempfile.TemporaryDirectory(prefix="edgeprof-calibrate-") as tmp:
        measure = _Measurer(Path(tmp), base_profile, train_s=measure_s)
        found = _search(measure, workload, target_samples_per_s, start, tolerance, report)
        result.quota_cores, result.samples_per_s = found[-1].quota_cores, found[-1].samples_per_s
        result.steps += found
        last_k, last_quota = 1.0, result.quota_cores
        for k in sorted(dilations):
            target = target_samples_per_s * k
            # Start from the last quota found, scaled: the rate per core grows with the
            # quota, so this overshoots a little, never by much.
            start_quota = min(last_quota * k / last_k, MAX_NODE_CORES)
            try:
                steps = _search(measure, workload, target, start_quota, tolerance, report,
                                most_cores=MAX_NODE_CORES)
            except QuotaOutOfReach as exc:
                report(f"speedup {k:g}: not calibrated ({exc})")
                break  # a larger speedup needs even more
            except NotSettled as exc:
                # One speedup lost to noise leaves the others usable: the emulated
                # cluster picks among the speedups calibrated (profiles.dilation).
                report(f"speedup {k:g}: not calibrated ({exc})")
                continue
            result.dilations[k] = steps[-1]
            last_k, last_quota = k, steps[-1].quota_cores
        if check is not None:
            check_workload, check_target = check
            # The quota the check's model trains at in the profile written (a fresh
            # cpu_cores keeps no per-model quota of the base: write_profile).
            check_quota = (base_profile.cpu_cores_for(check_workload.model)
                           if model_quota and check_workload.model != workload.model
                           else result.quota_cores)
            step = measure(check_workload, check_quota, check_target)
            result.check_workload = check_workload.label
            result.check_target_samples_per_s = check_target
            result.check_samples_per_s = step.samples_per_s
            report(f"check {check_workload.label}: {step.samples_per_s:.2f} samples/s at "
                   f"{check_quota:.4f} cores (reference {check_target:g}, ratio "
                   f"{result.check_ratio:.3f})")
    return result


class QuotaOutOfReach(ClusterError):
    """The rate asked for needs a quota outside what a node may get."""


class NotSettled(ClusterError):
    """The measured rate kept missing the target (``why``: what the measurements showed)."""

    def __init__(self, message: str, steps: list | None = None, why: str = ""):
        super().__init__(message)
        self.steps = steps or []
        self.why = why  # what the measurements showed, as a phrase (``_why_not``)


def _search(measure: "_Measurer", workload: Workload, target: float, quota: float,
            tolerance: float, report: Callable[[str], None],
            most_cores: float | None = None,
            first: Measurement | None = None) -> list[Measurement]:
    """Find the quota at which the rate is within ``tolerance`` of ``target``.

    Scales the quota by target / measured until two measurements bracket the target,
    then interpolates between the closest two on either side (the rate grows with the
    quota, not quite in proportion, and measurements are noisy: scaling alone can swing
    back and forth across the target). A measurement that contradicts that growth (a
    larger quota slower than a smaller one by more than ``MONOTONIC_SLACK``) is made once
    more and the quota's rate is the median of the two, before the next quota is chosen;
    of two neighbouring quotas whose rates grew faster than any pace does (``_jump``),
    the one farther from the target is measured twice more (the median of three).
    ``first``: a measurement at ``quota`` already made. Returns one measurement per quota
    tried (a repeated one: its median); ``NotSettled`` carries them, and says whether the
    rate was not monotonic in the quota and how far repeats at one quota differed.
    """
    most = most_cores or float(len(os.sched_getaffinity(0)))
    steps: list[Measurement] = []
    spreads: list[float] = []  # (largest - smallest) / median of each quota measured again
    for _ in range(MAX_STEPS):
        step = first if first is not None and not steps else measure(workload, quota, target)
        report(_said(workload, step, target))
        if any(_inversion([step, earlier]) for earlier in steps):
            step, spread = measured_more(step, 1, measure, workload, target, report)
            spreads.append(spread)
        steps.append(step)
        if (jump := _jump(steps)) is not None:
            steps, pooled, spread = _measured_again(steps, jump, measure, workload, target,
                                                    report)
            spreads.append(spread)
            if abs(pooled.samples_per_s / target - 1) <= tolerance:
                return [m for m in steps if m is not pooled] + [pooled]  # found: last
            step = steps[-1]
        if abs(step.samples_per_s / target - 1) <= tolerance:
            return steps
        quota = _next_quota(steps, target)
        if quota < MIN_CPU_CORES:
            raise ConfigError(
                f"{workload.label} would need {quota:.4f} cores for {target:g} samples/s, "
                f"below the smallest quota ({MIN_CPU_CORES}): check the rate, or "
                "calibrate on a heavier workload")
        if quota > most:
            raise QuotaOutOfReach(
                f"{workload.label} would need {quota:.2f} cores for {target:g} samples/s, "
                f"more than a node may have ({most:g}): calibrate on a faster host or a "
                "lighter workload")
    why = _why_not(steps, spreads, target)
    raise NotSettled(f"the rate did not settle within {tolerance:.0%} of {target:g} in "
                     f"{MAX_STEPS} quotas ({sum(m.repeats for m in steps)} measurements): {why}; "
                     "run it again on a quieter machine", steps, why)


def _said(workload: Workload, step: Measurement, target: float, again: bool = False) -> str:
    what = "again at" if again else "at"
    return (f"{workload.label}: {step.samples_per_s:.2f} samples/s {what} "
            f"{step.quota_cores:.4f} cores (target {target:g}, ratio "
            f"{step.samples_per_s / target:.3f})")


def _inversion(steps: list[Measurement]) -> tuple[Measurement, Measurement] | None:
    """The pair (smaller quota, larger quota) whose larger quota trained slowest against
    the smaller's rate, beyond ``MONOTONIC_SLACK``; None when the rate grows with the
    quota within it."""
    pairs = [(low, high) for low in steps for high in steps
             if high.quota_cores > low.quota_cores
             and low.samples_per_s > high.samples_per_s * (1 + MONOTONIC_SLACK)]
    return max(pairs, key=lambda p: p[0].samples_per_s / p[1].samples_per_s, default=None)


def _jump(steps: list[Measurement]) -> tuple[Measurement, Measurement] | None:
    """Two neighbouring quotas (in quota order) whose rate grew faster than
    ``MOST_SLOPE`` times the quota (log-log) and by more than ``JUMP_RATIO``, neither
    measured twice yet; None if none."""
    ordered = sorted(steps, key=lambda m: m.quota_cores)
    for low, high in zip(ordered, ordered[1:]):
        if (high.quota_cores > low.quota_cores
                and high.samples_per_s > JUMP_RATIO * low.samples_per_s > 0
                and low.repeats == high.repeats == 1
                and math.log(high.samples_per_s / low.samples_per_s)
                > MOST_SLOPE * math.log(high.quota_cores / low.quota_cores)):
            return low, high
    return None


def _measured_again(steps: list[Measurement], pair: tuple[Measurement, Measurement],
                    measure, workload: Workload, target: float,
                    report: Callable[[str], None]
                    ) -> tuple[list[Measurement], Measurement, float]:
    """``steps`` with the member of ``pair`` farther from ``target`` measured twice more
    and pooled in its place (its order kept, so the search's latest step stays last),
    the pooled measurement, and that quota's spread."""
    odd = max(pair, key=lambda m: abs(math.log(m.samples_per_s / target)))
    pooled, spread = measured_more(odd, 2, measure, workload, target, report)
    return [pooled if m is odd else m for m in steps], pooled, spread


def measured_more(first: Measurement, more: int, measure, workload: Workload,
                  target: float, report: Callable[[str], None]
                  ) -> tuple[Measurement, float]:
    """``first`` and ``more`` measurements again at its quota, each reported, pooled
    (``_pooled``: their median rate) with their spread."""
    repeats = [first]
    for _ in range(more):
        repeats.append(measure(workload, first.quota_cores, target))
        report(_said(workload, repeats[-1], target, again=True))
    return _pooled(repeats)


def _pooled(repeats: list[Measurement]) -> tuple[Measurement, float]:
    """One quota's repeats as one measurement (the median rate, their training time
    summed) and their spread, (largest - smallest) / median."""
    rates = [m.samples_per_s for m in repeats]
    rate = statistics.median(rates)
    return (Measurement(repeats[0].quota_cores, rate, sum(m.train_s for m in repeats),
                        repeats=sum(m.repeats for m in repeats)),
            (max(rates) - min(rates)) / rate)


def _why_not(steps: list[Measurement], spreads: list[float], target: float) -> str:
    """What the measurements of a search that did not settle showed, as a phrase: the
    rate not monotonic in the quota, how far repeats at one quota differed, else the
    closest quotas below and above the target (the curve between them steeper than a
    few measurements can follow: a host too busy, or a pace that moves in steps)."""
    said = []
    if (pair := _inversion(steps)) is not None:
        low, high = pair
        said.append(f"the rate was not monotonic in the quota ({high.quota_cores:.4f} cores "
                    f"trained {high.samples_per_s:.2f} samples/s, {low.quota_cores:.4f} "
                    f"cores {low.samples_per_s:.2f})")
    if spreads and max(spreads) > MONOTONIC_SLACK:  # within it: the repeat confirmed
        said.append(f"repeats at one quota differed by up to {max(spreads):.0%}")
    if said:
        return ", and ".join(said)
    below = [m for m in steps if m.samples_per_s < target]
    above = [m for m in steps if m.samples_per_s > target]
    if below and above:
        low = max(below, key=lambda m: m.samples_per_s)
        high = min(above, key=lambda m: m.samples_per_s)
        return (f"{low.quota_cores:.4f} cores trained {low.samples_per_s / target:.2f} x the "
                f"target and {high.quota_cores:.4f} cores {high.samples_per_s / target:.2f} x,"
                " with no quota between them within: the host too busy for the search, "
                "or a pace that moves in steps")
    side = "below" if below else "above"
    return f"every quota tried trained {side} the target: the host too busy for the search?"


def _next_quota(steps: list[Measurement], target: float) -> float:
    # The latest measurement on either side, not the closest: with noisy rates, the
    # closest can be a lucky outlier, and interpolating towards it again and again
    # lands on the same quota without ever getting nearer.
    below = [s for s in steps if s.samples_per_s < target]
    above = [s for s in steps if s.samples_per_s > target]
    if below and above:
        low, high = below[-1], above[-1]
        if high.quota_cores > low.quota_cores:
            share = (target - low.samples_per_s) / (high.samples_per_s - low.samples_per_s)
            return low.quota_cores + share * (high.quota_cores - low.quota_cores)
    last = steps[-1]
    return last.quota_cores * target / last.samples_per_s


class _Measurer:
    """Runs one-device cells at a given quota, each on a freshly built one-node cluster."""

    def __init__(self, work: Path, base: Profile, steps: int = MEASURE_STEPS,
                 train_s: float = MEASURE_TRAIN_S):
        self.work, self.base, self.count, self.steps = work, base, 0, steps
        self.train_s = train_s

    def __call__(self, workload: Workload, quota: float, expected_rate: float) -> Measurement:
        self.count += 1
        self.work.mkdir(parents=True, exist_ok=True)
        # The rate at this quota is expected near target x quota ratio; a few steps at
        # least, about train_s of training at the target rate otherwise.
        samples = max(self.steps * workload.batch,
                      int(math.ceil(expected_rate * self.train_s)))
        # A new name: the cluster is rebuilt with the candidate quota.
        # The base's environment per model too: a quota is calibrated with it.
        candidate = Profile(name=f"calibrating-{self.count}", link_mbit=self.base.link_mbit,
                            memory_mb=self.base.memory_mb, cpu_cores=round(quota, 5),
                            env_by_model=self.base.env_by_model)
        settings = SweepSettings(cells=[workload.cell(samples)],
                                 out_dir=self.work / f"cell-{self.count}",
                                 cluster=profiled_provider()(profile=candidate),
                                 interval_s=None, val_samples=workload.batch)
        record = run_sweep(settings, progress=False).records[0]
        s_per_sample = record.get("robust_s_per_sample") or record.get("steady_s_per_sample")
        if record["status"] != Status.OK or not s_per_sample:
            raise ClusterError(f"the calibration cell ({workload.label} at {quota:.4f} "
                               f"cores) ended {record['status']}: {record.get('reason')}")
        # The steady rate, without the first step's one-off set-up and the host's slow
        # moments (timeline/rate.py): what a board's epoch of hundreds of steps shows, and
        # what the report compares (report/ratios.py).
        return Measurement(quota, 1.0 / float(s_per_sample), float(record["train_s"]))


def _refuse_a_running_cluster() -> None:
    # Each measurement rebuilds a one-node cluster: an existing one would be taken down.
    provider = profiled_provider()
    if not provider.running():
        return
    raise ClusterError(f"an {provider.name} cluster is up and calibration rebuilds it: "
                       "`edgeprof cluster down` first (or wait for its sweep to end)")
