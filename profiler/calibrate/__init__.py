"""Calibrate an emulated node's CPU quota to a real board's training rate.

A profile's ``cpu_cores`` is a guess from benchmark scores; what a study reports is how
fast a board *trains*. ``calibrate`` finds the quota at which one emulated node trains a
workload at a given rate (samples per second of training: the workers' ``train_s``, not
process start-up, which the training roles pay outside the quota, see
``workloads.node_limits``), then measures a second workload at that quota and says how
far it lands from its own reference. A single-threaded training process uses a quota
below one core in proportion, so each step scales the quota by target / measured; it
stops when the rate is within the tolerance (a few steps).

The measurement runs a real one-device cell (MXNet, KVStore ``local``) on a one-node
emulated cluster whose profile is the base profile with the candidate quota, through
``run_sweep`` like any sweep, with no metrics agent. Data is the synthetic set of the
workload's shape: the rate does not depend on the pixels.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import yaml

from ..cell import CellConfig
from ..cluster import emulated
from ..cluster.profiles import MIN_CPU_CORES, PROFILES_ENV, USER_PROFILES, Profile, load_catalog
from ..errors import ClusterError, ConfigError
from ..fsutil import atomic_write_text
from ..sweep.grid import validate
from ..sweep.sweep import SweepSettings, run_sweep

MEASURE_TRAIN_S = 8.0  # training seconds per measurement at the target rate
MAX_STEPS = 5
DEFAULT_TOLERANCE = 0.05


@dataclass(frozen=True)
class Workload:
    """What is trained: ``lenet-mlp``, ``lenet-cnn`` or ``resnet-<layers>``, and the batch."""

    model: str
    layers: int | None
    batch: int

    @classmethod
    def parse(cls, text: str, batch: int) -> "Workload":
        text = text.strip().lower()
        if text in ("lenet-mlp", "lenet-cnn"):
            return cls(text, None, batch)
        if text.startswith("resnet-") and text[7:].isdigit():
            return cls("resnet", int(text[7:]), batch)
        raise ConfigError(f"unknown workload {text!r}: use lenet-mlp, lenet-cnn or "
                          "resnet-<layers> (e.g. resnet-32)")

    @property
    def label(self) -> str:
        name = self.model if self.layers is None else f"resnet-{self.layers}"
        return f"{name} batch {self.batch}"

    def cell(self, samples: int) -> CellConfig:
        return validate(CellConfig(model=self.model, layers=self.layers, batch=self.batch,
                                   devices=1, epochs=1, max_samples=samples,
                                   dataset="synthetic"))


@dataclass
class Measurement:
    quota_cores: float
    samples_per_s: float
    train_s: float


@dataclass
class Calibration:
    profile: str
    base: str
    workload: str
    target_samples_per_s: float
    quota_cores: float
    samples_per_s: float
    check_workload: str | None = None
    check_target_samples_per_s: float | None = None
    check_samples_per_s: float | None = None
    steps: list[Measurement] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.samples_per_s / self.target_samples_per_s

    @property
    def check_ratio(self) -> float | None:
        if self.check_samples_per_s is None or not self.check_target_samples_per_s:
            return None
        return self.check_samples_per_s / self.check_target_samples_per_s


def calibrate(profile: str, base: str, workload: Workload, target_samples_per_s: float, *,
              check: tuple[Workload, float] | None = None,
              tolerance: float = DEFAULT_TOLERANCE,
              report: Callable[[str], None] = lambda line: None) -> Calibration:
    """Find the quota; see the module docstring. ``report`` gets one line per step."""
    if not target_samples_per_s > 0:
        raise ConfigError(f"--samples-per-s {target_samples_per_s}: give the board's "
                          "training rate, a number > 0")
    base_profile = _base_profile(base)
    _refuse_a_running_cluster()
    result = Calibration(profile=profile, base=base, workload=workload.label,
                         target_samples_per_s=target_samples_per_s,
                         quota_cores=base_profile.cpu_cores, samples_per_s=0.0)
    host_cores = float(len(os.sched_getaffinity(0)))
    with tempfile.TemporaryDirectory(prefix="edgeprof-calibrate-") as tmp:
        measure = _Measurer(Path(tmp), base_profile)
        quota = base_profile.cpu_cores
        for _ in range(MAX_STEPS):
            step = measure(workload, quota, target_samples_per_s)
            result.steps.append(step)
            report(f"{workload.label}: {step.samples_per_s:.1f} samples/s at {quota:.4f} "
                   f"cores (target {target_samples_per_s:g}, ratio "
                   f"{step.samples_per_s / target_samples_per_s:.3f})")
            result.quota_cores, result.samples_per_s = quota, step.samples_per_s
            if abs(step.samples_per_s / target_samples_per_s - 1) <= tolerance:
                break
            quota = quota * target_samples_per_s / step.samples_per_s
            if quota < MIN_CPU_CORES:
                raise ConfigError(
                    f"{workload.label} would need {quota:.4f} cores for "
                    f"{target_samples_per_s:g} samples/s, below the smallest quota "
                    f"({MIN_CPU_CORES}): check the rate, or calibrate on a heavier workload")
            if quota > host_cores:
                raise ClusterError(
                    f"{workload.label} would need {quota:.2f} cores for "
                    f"{target_samples_per_s:g} samples/s, more than this host has "
                    f"({host_cores:g}): calibrate on a faster host or a lighter workload")
        else:
            raise ClusterError(f"the rate did not settle within {tolerance:.0%} of "
                               f"{target_samples_per_s:g} in {MAX_STEPS} steps (the host is "
                               "too busy?): run it again on a quieter machine")
        if check is not None:
            check_workload, check_target = check
            step = measure(check_workload, result.quota_cores, check_target)
            result.check_workload = check_workload.label
            result.check_target_samples_per_s = check_target
            result.check_samples_per_s = step.samples_per_s
            report(f"check {check_workload.label}: {step.samples_per_s:.2f} samples/s at "
                   f"{result.quota_cores:.4f} cores (reference {check_target:g}, ratio "
                   f"{result.check_ratio:.3f})")
    return result


class _Measurer:
    """Runs one-device cells at a given quota, each on a freshly built one-node cluster."""

    def __init__(self, work: Path, base: Profile):
        self.work, self.base, self.count = work, base, 0

    def __call__(self, workload: Workload, quota: float, expected_rate: float) -> Measurement:
        self.count += 1
        self.work.mkdir(parents=True, exist_ok=True)
        # The rate at this quota is expected near target x quota ratio; a few steps at
        # least, about MEASURE_TRAIN_S of training at the target rate otherwise.
        samples = max(4 * workload.batch, int(math.ceil(expected_rate * MEASURE_TRAIN_S)))
        name = f"calibrating-{self.count}"  # a new name: the cluster is rebuilt
        profiles = self.work / f"profiles-{self.count}.yaml"
        profiles.write_text(yaml.safe_dump({"profiles": {name: {
            "link_mbit": self.base.link_mbit, "memory_mb": self.base.memory_mb,
            "cpu_cores": round(quota, 5)}}}))
        settings = SweepSettings(cells=[workload.cell(samples)],
                                 out_dir=self.work / f"cell-{self.count}",
                                 cluster="emulated", profile=name, interval_s=None,
                                 val_samples=workload.batch)
        with _environ(PROFILES_ENV, str(profiles)):
            record = run_sweep(settings, progress=False).records[0]
        if record["status"] != "ok" or not record.get("samples_per_s"):
            raise ClusterError(f"the calibration cell ({workload.label} at {quota:.4f} "
                               f"cores) ended {record['status']}: {record.get('reason')}")
        return Measurement(quota, float(record["samples_per_s"]), float(record["train_s"]))


def write_profile(result: Calibration, path: Path | None = None) -> Path:
    """Add (or replace) the calibrated profile in ``path`` (default: the user's file)."""
    path = Path(path or USER_PROFILES).expanduser()
    base = _base_profile(result.base)
    doc: dict = {}
    if path.exists():
        doc = yaml.safe_load(path.read_text()) or {}
        if not isinstance(doc, dict):
            raise ConfigError(f"{path} is not a profiles file (no mapping at the top): "
                              "give another --to FILE")
    note = (f"calibrated on {platform.node()} {time.strftime('%Y-%m-%d')}: {result.workload} "
            f"at {result.samples_per_s:.1f} samples/s (target "
            f"{result.target_samples_per_s:g})")
    if result.check_ratio is not None:
        note += (f"; {result.check_workload} {result.check_samples_per_s:.2f} samples/s, "
                 f"{result.check_ratio:.2f} x its reference {result.check_target_samples_per_s:g}")
    doc.setdefault("profiles", {})[result.profile] = {
        "description": f"{base.description or base.name}, CPU calibrated ({note})",
        "link_mbit": base.link_mbit, "memory_mb": base.memory_mb,
        "cpu_cores": round(result.quota_cores, 4),
        "calibration": {k: v for k, v in asdict(result).items() if k != "steps"}}
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, yaml.safe_dump(doc, sort_keys=False))
    load_catalog()  # the file just written must read back (raises one line if not)
    return path


def _base_profile(name: str) -> Profile:
    catalog = load_catalog()
    if name not in catalog.profiles:
        raise ConfigError(f"unknown base profile {name!r}: use one of "
                          f"{', '.join(sorted(catalog.profiles))} (its link and memory are kept)")
    return catalog.profiles[name]


def _refuse_a_running_cluster() -> None:
    # Each measurement rebuilds a one-node cluster: an existing one would be taken down.
    try:
        emulated.attach()
    except ClusterError:
        return
    raise ClusterError("an emulated cluster is up and calibration rebuilds it: "
                       "`edgeprof cluster down` first (or wait for its sweep to end)")


@contextlib.contextmanager
def _environ(name: str, value: str) -> Iterator[None]:
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old
