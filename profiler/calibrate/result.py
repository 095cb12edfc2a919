"""What a calibration found: each measurement and the result ``profiles_file`` writes.

Its own module so that ``calibrate`` (which measures) and ``profiles_file`` (which
writes) both read it, neither importing the other's package.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..cluster.profiles import BoardRate


@dataclass
class Measurement:
    quota_cores: float
    samples_per_s: float
    train_s: float
    repeats: int = 1  # measurements pooled into this one (their median rate)


@dataclass
class Calibration:
    profile: str
    base: str
    workload: str
    target_samples_per_s: float
    quota_cores: float
    samples_per_s: float
    model: str | None = None  # set: the quota is this model family's own
    check_workload: str | None = None
    check_target_samples_per_s: float | None = None
    check_samples_per_s: float | None = None
    steps: list[Measurement] = field(default_factory=list)
    dilations: dict[float, Measurement] = field(default_factory=dict)  # speedup -> found
    board_rate: BoardRate | None = None  # what the quota is calibrated to

    @property
    def ratio(self) -> float:
        return self.samples_per_s / self.target_samples_per_s

    @property
    def check_ratio(self) -> float | None:
        if self.check_samples_per_s is None or not self.check_target_samples_per_s:
            return None
        return self.check_samples_per_s / self.check_target_samples_per_s
