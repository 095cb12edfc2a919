"""``throttle``: the Raspberry Pi firmware's throttling word, from sysfs or ``vcgencmd``.

Both can be moved (``$EDGEPROF_SYSFS_ROOT``, ``$EDGEPROF_VCGENCMD``: ``base.system_path``).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from .base import (Collector, Field, Periodic, Sample, Unavailable, system_path,
                   vcgencmd_path)

# Bits of the Raspberry Pi firmware's get_throttled word.
THROTTLE_BITS = {"under_voltage": 0, "freq_capped": 1, "throttled": 2, "soft_temp_limit": 3,
                 "under_voltage_occurred": 16, "freq_capped_occurred": 17,
                 "throttled_occurred": 18, "soft_temp_limit_occurred": 19}
THROTTLED_SYSFS = Path("/sys/devices/platform/soc/soc:firmware/get_throttled")


class PiThrottling(Collector):
    FIELDS = (Field("throttle", "flags", "bits", "the raw get_throttled word (int)"),) + tuple(
        Field("throttle", name, "bool",
              f"bit {bit}: {name.replace('_occurred', '').replace('_', ' ')} "
              + ("since boot (sticky)" if name.endswith("_occurred") else "now"))
        for name, bit in THROTTLE_BITS.items())
    # Spawning vcgencmd costs more CPU than a whole tick; the sticky *_occurred bits
    # keep what happened between two readings (metrics.reducers.throttled_during), so a
    # reading every 10 s misses nothing.
    VCGENCMD_EVERY_S = 10.0
    VCGENCMD_TIMEOUT_S = 5.0

    def __init__(self, sysfs: Path | None = None):
        sysfs = system_path(THROTTLED_SYSFS) if sysfs is None else sysfs
        self.sysfs = sysfs if sysfs.exists() else None
        self.vcgencmd = None if self.sysfs else vcgencmd_path()
        if not self.sysfs and not self.vcgencmd:
            raise Unavailable("Raspberry Pi throttling flags (no vcgencmd)")
        # A vcgencmd that fails or hangs is tried again only after VCGENCMD_EVERY_S, not
        # on every tick (the sampler logs the error).
        self._vcgencmd_flags = Periodic(self.VCGENCMD_EVERY_S, self._run_vcgencmd)

    def _flags(self) -> int | None:
        if self.sysfs:
            return int(self.sysfs.read_text().strip(), 16)
        return self._vcgencmd_flags()

    def _run_vcgencmd(self) -> int:
        out = subprocess.run([self.vcgencmd, "get_throttled"], capture_output=True, text=True,
                             timeout=self.VCGENCMD_TIMEOUT_S, check=True).stdout
        return int(out.strip().split("=")[-1], 16)

    def collect(self) -> list[Sample]:
        flags = self._flags()
        if flags is None:
            return []  # the last vcgencmd failed: nothing until the next try
        fields: dict[str, float | int | bool] = {"flags": flags}
        fields.update({name: bool(flags >> bit & 1) for name, bit in THROTTLE_BITS.items()})
        return [("throttle", {}, fields)]
