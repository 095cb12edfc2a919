"""``power_rapl``: an x86 host's package and DRAM power, from RAPL's energy counters.

Intel (and AMD, through the same ``intel-rapl`` powercap driver) CPUs count the energy
of each package, and often of its DRAM, in ``/sys/class/powercap/intel-rapl:*/energy_uj``
(microjoules, named by the zone's ``name``: ``package-0``, ``dram``). The power of a
tick is the counter's difference over the tick's ``time.monotonic()``; the counter
wraps at ``max_energy_range_uj``, which a difference that went backwards adds back.
The package's ``core``/``uncore`` sub-zones are inside it and ``psys`` holds it: only
``package-*`` and ``dram`` zones are read, so nothing is counted twice.

This is the host's power, not a slot's: the local cluster's nodes share it
(``profiler.metrics.energy`` splits it among them). Where the zones are missing (VMs,
ARM boards) or ``energy_uj`` is readable by root only (Linux 5.10 on, against the
PLATYPUS side channel) the collector is ``Unavailable``. No RAPL here: tests build a
fake powercap tree, with a wrapping counter, and pass its root to the constructor (or
put a whole fake /sys under ``$EDGEPROF_SYSFS_ROOT``, ``base.system_path``).
"""

from __future__ import annotations

import time
from pathlib import Path

from .base import Collector, Field, Sample, Unavailable, read_int, system_path

POWERCAP_ROOT = Path("/sys/class/powercap")  # under $EDGEPROF_SYSFS_ROOT when set


class Zone:
    """One RAPL zone's counter and its wrap."""

    def __init__(self, path: Path, domain: str):
        self.energy_file = path / "energy_uj"
        self.domain = domain
        self.max_uj = read_int(path / "max_energy_range_uj")
        self.last = (time.monotonic(), read_int(self.energy_file))

    def read(self) -> dict[str, float | int]:
        now, energy_uj = time.monotonic(), read_int(self.energy_file)
        then, before = self.last
        self.last = (now, energy_uj)
        delta_uj = energy_uj - before
        if delta_uj < 0:  # wrapped at max_energy_range_uj
            delta_uj += self.max_uj + 1
        return {"energy_uj": energy_uj,
                "power_w": delta_uj / 1e6 / max(now - then, 1e-9)}


def find_zones(root: Path) -> list[Zone]:
    """The package and DRAM zones under ``root`` (powercap's class folder), primed.

    Raises ``Unavailable`` when there are none, or their counters cannot be read."""
    zones = []
    for path in sorted(root.glob("intel-rapl:*")):
        try:
            name = (path / "name").read_text().strip()
        except OSError:
            continue
        if not (name.startswith("package") or name == "dram"):
            continue
        parent = path.name.rsplit(":", 1)[0]
        domain = name
        if name == "dram" and parent != "intel-rapl":
            # A package's own DRAM sub-zone: named by its package (two sockets, two drams).
            try:
                domain = f"{(root / parent / 'name').read_text().strip()}/dram"
            except OSError:
                pass
        try:
            zones.append(Zone(path, domain))
        except PermissionError:
            raise Unavailable(f"RAPL power ({path / 'energy_uj'} is readable by root "
                              "only)") from None
        except (OSError, ValueError) as exc:
            raise Unavailable(f"RAPL power ({path}: {exc})") from None
    if not zones:
        raise Unavailable(f"RAPL power (no package or dram zone in {root})")
    return zones


class Rapl(Collector):
    FIELDS = (
        Field("power_rapl", "power_w", "W", "the zone's power over the tick (its "
                                            "energy counter's difference, wraps added back)"),
        Field("power_rapl", "energy_uj", "µJ", "the zone's energy counter (int; wraps at "
                                               "max_energy_range_uj)"),
    )
    TAGS = {"domain": "power_rapl: the RAPL zone (package-0, package-0/dram)"}

    def __init__(self, root: Path | None = None):
        self.zones = find_zones(system_path(POWERCAP_ROOT) if root is None else root)

    def collect(self) -> list[Sample]:
        return [("power_rapl", {"domain": zone.domain}, zone.read()) for zone in self.zones]
