"""``thermal``: each temperature sensor's hottest reading.

The files psutil's ``sensors_temperatures()`` reads: every hwmon device's
``temp<K>_input`` (millidegrees Celsius; also under its ``device/`` folder, as CentOS
has it), the sensor named by the ``name`` file beside it (a Pi's ``cpu_thermal``); where
no hwmon device has one, every thermal zone's ``temp``, named by its ``type``. They are
read here rather than through psutil, whose paths are fixed, so that
``$EDGEPROF_SYSFS_ROOT`` moves them (``base.system_path``); and they are listed once at
start, as ``disk`` lists its devices (psutil globbed them and read each sensor's max,
crit and label files on every call, for the one number kept here). A sensor added later
is not read.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from .base import Collector, Field, Sample, Unavailable, read_int, system_path

HWMON_ROOT = Path("/sys/class/hwmon")  # under $EDGEPROF_SYSFS_ROOT when set
THERMAL_ROOT = Path("/sys/class/thermal")


def _name(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def find_sensors(hwmon: Path, thermal: Path) -> dict[str, list[Path]]:
    """Sensor name → its millidegree files: hwmon's, else the thermal zones'."""
    sensors: dict[str, list[Path]] = defaultdict(list)
    for device in sorted(hwmon.glob("hwmon*")):
        for folder in (device, device / "device"):
            inputs = sorted(folder.glob("temp*_input"))
            name = _name(folder / "name") if inputs else None
            if name:
                sensors[name] += inputs
    if not sensors:
        for zone in sorted(thermal.glob("thermal_zone*")):
            name = _name(zone / "type")
            if name:
                sensors[name].append(zone / "temp")
    return dict(sensors)


class Temperature(Collector):
    FIELDS = (Field("thermal", "temp_c", "°C", "the sensor's hottest reading"),)
    TAGS = {"sensor": "thermal: the sensor's name (e.g. cpu_thermal)"}

    def __init__(self, hwmon: Path | None = None, thermal: Path | None = None):
        self.sensors = find_sensors(system_path(HWMON_ROOT) if hwmon is None else hwmon,
                                    system_path(THERMAL_ROOT) if thermal is None else thermal)
        if not self.collect():
            raise Unavailable("temperature sensors")

    def collect(self) -> list[Sample]:
        samples: list[Sample] = []
        for sensor, files in sorted(self.sensors.items()):
            readings = []
            for path in files:
                try:
                    readings.append(read_int(path))
                except (OSError, ValueError):
                    continue  # a sensor that cannot be read now (psutil skips it too)
            if readings:
                samples.append(("thermal", {"sensor": sensor},
                                {"temp_c": max(readings) / 1000.0}))
        return samples
