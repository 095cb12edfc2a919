"""What every collector is: a small class that is primed once and samples on ``collect()``.

A collector primes itself in its constructor (psutil's percentages and our deltas need
a previous reading), and ``collect()`` returns ``(measurement, tags, fields)`` tuples.
``FIELDS`` says, as data, what each field means and in which unit (as Glances'
``fields_description`` does); docs/metrics.md's table of measurements is generated from
it (``profiler.agent.schema``) and a test compares the two. Field types never change
between points (counters are ints, percentages and MB are floats): InfluxDB rejects a
field whose type changes.

A collector whose hardware is missing here (no temperature sensors on x86 VMs, no
``vcgencmd`` off a Pi, no disk counters in a container) raises ``Unavailable`` from its
constructor: ``build`` logs that once at INFO and leaves it out, and it is never tried
again. A ``collect()`` that fails at run time (any exception: a ``vcgencmd`` that times
out, a file that vanished) costs that collector its tick only: the sampler logs it once
at WARNING and goes on.

The hardware collectors' files and command can be moved, to check them from outside
without a private mount namespace: ``$EDGEPROF_SYSFS_ROOT`` is put before every /sys and
/proc/device-tree path they read (``system_path``), ``$EDGEPROF_VCGENCMD`` is the
``vcgencmd`` they run (``vcgencmd_path``). Both are read once, when the agent builds its
collectors; psutil's readings (CPU, memory, network, disk, /proc/cpuinfo) stay the host's.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

from ...plugins import Registry

log = logging.getLogger(__name__)

MB = 1024 * 1024
Sample = tuple[str, dict[str, str], dict[str, float | int | bool]]


class Unavailable(Exception):
    """This collector's hardware (sensor, counter, cgroup file) does not exist here."""


@dataclass(frozen=True)
class Field:
    """One field of one measurement: its unit and what it means."""

    measurement: str
    name: str
    unit: str  # "%", "MB", "MHz", "°C", "s", "count", "bool", "bytes", ...
    description: str


def counter_fields(measurement: str, counters: dict[str, tuple[str, str]]) -> tuple[Field, ...]:
    """A counter's three fields as ``Deltas`` writes them: total, ``_delta``, ``_per_s``.

    ``counters``: name → (unit, what it counts), e.g. {"sent_bytes": ("bytes", "sent")}.
    """
    fields = []
    for name, (unit, what) in counters.items():
        fields += [Field(measurement, name, unit, f"{what}, counter (int)"),
                   Field(measurement, f"{name}_delta", unit,
                         f"{what} since the previous tick (int)"),
                   Field(measurement, f"{name}_per_s", f"{unit}/s",
                         f"{what} per second since the previous tick")]
    return tuple(fields)


class Collector:
    """The base of every collector: ``create`` for an agent's config, then ``collect``.

    Subclasses set ``FIELDS`` (every field they write, as ``Field``s) and ``TAGS`` (the
    tags they add to their points beyond the agent's, name → meaning), prime themselves
    in ``__init__`` (raising ``Unavailable`` when their hardware is missing) and return
    one tick's points from ``collect``.
    """

    FIELDS: ClassVar[tuple[Field, ...]] = ()
    TAGS: ClassVar[dict[str, str]] = {}

    @classmethod
    def create(cls, config, spool) -> "Collector | None":
        """This collector for ``config`` (an ``AgentConfig``), or None when it does not
        apply to it (a cgroup collector without --cgroup-cpu). ``spool`` is the agent's
        ``SpoolWriter``, for the collectors that report on the agent itself."""
        return cls()

    def collect(self) -> list[Sample]:
        raise NotImplementedError


REGISTRY: list[type[Collector]] = []


def register(cls: type[Collector]) -> type[Collector]:
    """Add a collector class to the ones every agent builds (in registration order)."""
    REGISTRY.append(cls)
    return cls


def _clash(cls: type[Collector]) -> str | None:
    """What keeps a plugin's collector from writing beside the built-ins: no fields
    said, or a field a built-in collector writes (the types and meanings would mix)."""
    if not cls.FIELDS or not all(isinstance(f, Field) for f in cls.FIELDS):
        return ("says no FIELDS: list every field it writes as a "
                "profiler.agent.collectors.Field (unit, meaning)")
    for field in cls.FIELDS:
        owner = next((builtin for builtin in REGISTRY
                      if (field.measurement, field.name) in
                      {(f.measurement, f.name) for f in builtin.FIELDS}), None)
        if owner is not None:
            return (f"writes {field.measurement}.{field.name}, a field of the built-in "
                    f"collector {owner.__name__}: give its points a measurement of their "
                    "own")
    return None


# Collectors of installed distributions (the entry points of ``edgeprof.collectors``,
# each naming a ``Collector`` subclass), loaded when an agent first builds its own.
PLUGINS: Registry[type[Collector]] = Registry(
    "edgeprof.collectors", Collector, {}, kind="collector", named=False, check=_clash)


def build(config, spool) -> list[Collector]:
    """The registered collectors, then the installed plugins' (``PLUGINS``), that apply
    to ``config`` and whose hardware is here.

    Missing hardware is said once, at INFO, here: the collector is left out for good.
    """
    built = []
    for cls in (*REGISTRY, *PLUGINS.values()):
        try:
            collector = cls.create(config, spool)
        except Unavailable as exc:
            log.info("not collected here: %s", exc)
            continue
        if collector is not None:
            built.append(collector)
    return built


SYSFS_ROOT_ENV = "EDGEPROF_SYSFS_ROOT"
VCGENCMD_ENV = "EDGEPROF_VCGENCMD"


def system_path(path: str | Path) -> Path:
    """``path`` (absolute: /sys/..., /proc/device-tree/...) under ``$EDGEPROF_SYSFS_ROOT``,
    or itself when that is unset or empty."""
    root = os.environ.get(SYSFS_ROOT_ENV)
    path = Path(path)
    return Path(root) / path.relative_to(path.anchor) if root else path


def vcgencmd_path() -> str | None:
    """The ``vcgencmd`` to run: ``$EDGEPROF_VCGENCMD`` (a path, or a name on PATH) when
    set, else ``vcgencmd`` on PATH; None when that is not an executable.

    Raises ``Unavailable`` when ``$EDGEPROF_VCGENCMD`` names no executable: a setting that
    points nowhere is said, not taken for a board without the command."""
    chosen = os.environ.get(VCGENCMD_ENV)
    if not chosen:
        return shutil.which("vcgencmd")
    found = shutil.which(chosen)
    if found is None:
        raise Unavailable(f"vcgencmd (${VCGENCMD_ENV}={chosen} is not an executable)")
    return found


def read_int(path) -> int:
    """A sysfs file holding one integer (a counter, microwatts), read in one call."""
    with open(path, "rb") as f:
        return int(f.read())


class Periodic:
    """A reading too dear for every tick, taken again at most every ``period_s``; the
    last one is repeated in between.

    The time is noted before the read: a read that raises or hangs is tried again only
    after ``period_s``, not on every tick, and gives None meanwhile.
    """

    def __init__(self, period_s: float, read: Callable[[], Any], first: Any = None):
        self.period_s, self.read = period_s, read
        # A reading already taken (a collector's check in its constructor) serves first.
        self._at = None if first is None else time.monotonic()
        self._value = first

    def __call__(self) -> Any:
        now = time.monotonic()
        if self._at is None or now - self._at >= self.period_s:
            self._at, self._value = now, None
            self._value = self.read()
        return self._value


class Deltas:
    """Counter differences and rates between two ticks (``time.monotonic`` based)."""

    def __init__(self):
        self._last: dict[str, tuple[float, dict[str, int]]] = {}

    def fields(self, key: str, counters: dict[str, int]) -> dict[str, float | int]:
        now = time.monotonic()
        out: dict[str, float | int] = dict(counters)
        previous = self._last.get(key)
        self._last[key] = (now, counters)
        if previous is not None:
            elapsed_s = max(now - previous[0], 1e-9)
            for name, value in counters.items():
                # A counter that went backwards was reset (interface re-created): restart.
                delta = max(0, value - previous[1].get(name, value))
                out[f"{name}_delta"] = delta
                out[f"{name}_per_s"] = delta / elapsed_s
        return out
