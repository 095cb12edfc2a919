"""``power_hwmon``: power monitors the kernel knows (INA219/INA226 and kin), from hwmon.

A board wired through an INA2xx shunt monitor (the ``ina2xx``, ``ina3221`` and
``ina238`` drivers) or a USB-C meter that registers as hwmon shows up as
``/sys/class/hwmon/hwmon<N>/`` with a ``name`` file. Each channel gives ``power<K>_input``
(microwatts), else ``in<K>_input`` (millivolts) x ``curr<K>_input`` (milliamps) of the
same index (the ina2xx driver's ``in0`` is the shunt's drop, its ``in1`` the bus: a
channel pairs the bus voltage and current of one index). Only devices whose name is a
power monitor's are read: a workstation's hwmon also holds GPUs and fans whose watts are
not the board's (``is_power_monitor``).

Without such a device the collector is ``Unavailable``. No power monitor here: tests
build a fake hwmon tree and pass its root to the constructor (or put a whole fake /sys
under ``$EDGEPROF_SYSFS_ROOT``, ``base.system_path``).
"""

from __future__ import annotations

import re
from pathlib import Path

from .base import Collector, Field, Sample, Unavailable, read_int, system_path

HWMON_ROOT = Path("/sys/class/hwmon")  # under $EDGEPROF_SYSFS_ROOT when set
# Driver names of board power monitors: TI's INA2xx/INA3221 family. A USB-C meter's
# driver name can be added here.
MONITOR_NAME = re.compile(r"^ina\d+")


def is_power_monitor(name: str) -> bool:
    return bool(MONITOR_NAME.match(name))


class Channel:
    """One channel of one monitor: its files, read every tick."""

    def __init__(self, monitor: str, index: str, power: Path | None,
                 volts: Path | None, amps: Path | None):
        self.tags = {"monitor": monitor, "channel": index}
        self.power, self.volts, self.amps = power, volts, amps

    def read(self) -> dict[str, float]:
        fields: dict[str, float] = {}
        if self.volts is not None and self.amps is not None:
            fields["voltage_v"] = read_int(self.volts) / 1000.0
            fields["current_a"] = read_int(self.amps) / 1000.0
        if self.power is not None:
            fields["power_w"] = read_int(self.power) / 1e6
        else:
            fields["power_w"] = fields["voltage_v"] * fields["current_a"]
        return fields


def find_channels(root: Path) -> list[Channel]:
    """The power channels of every power monitor under ``root`` (hwmon's class folder)."""
    channels = []
    for device in sorted(root.glob("hwmon*")):
        try:
            name = (device / "name").read_text().strip()
        except OSError:
            continue
        if not is_power_monitor(name):
            continue
        monitor = f"{name}/{device.name}"
        power = {p.name[5:-6]: p for p in device.glob("power*_input")}
        volts = {p.name[2:-6]: p for p in device.glob("in*_input")}
        amps = {p.name[4:-6]: p for p in device.glob("curr*_input")}
        for index in sorted(set(power) | (set(volts) & set(amps))):
            channels.append(Channel(monitor, index, power.get(index), volts.get(index),
                                    amps.get(index)))
    return channels


class HwmonPower(Collector):
    FIELDS = (
        Field("power_hwmon", "power_w", "W", "the channel's power: powerK_input (µW), else "
                                             "inK_input (mV) x currK_input (mA)"),
        Field("power_hwmon", "voltage_v", "V", "the channel's bus voltage (inK_input), where "
                                               "it has one"),
        Field("power_hwmon", "current_a", "A", "the channel's current (currK_input), where "
                                               "it has one"),
    )
    TAGS = {"monitor": "power_hwmon: the monitor's driver name and hwmon folder "
                       "(ina219/hwmon2)",
            "channel": "power_hwmon: the channel's index K in its files"}

    def __init__(self, root: Path | None = None):
        root = system_path(HWMON_ROOT) if root is None else root
        self.channels = find_channels(root)
        if not self.channels:
            raise Unavailable(f"hwmon power monitors (no ina2xx-class device in {root})")

    def collect(self) -> list[Sample]:
        return [("power_hwmon", dict(channel.tags), channel.read())
                for channel in self.channels]
