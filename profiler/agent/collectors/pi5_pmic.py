"""``power_pmic``: a Raspberry Pi 5's power, from its PMIC's rails (``vcgencmd pmic_read_adc``).

The Pi 5's power-management chip measures current and voltage on twelve rails
(VDD_CORE, DDR_VDD2, DDR_VDDQ, 3V3_SYS, 1V8_SYS, 1V1_SYS, 0V8_SW, 0V8_AON, 3V7_WL_SW,
HDMI, 3V3_DAC, 3V3_ADC) and the 5 V input (EXT5V_V). ``vcgencmd pmic_read_adc`` prints
one line per ADC channel::

     VDD_CORE_A current(7)=0.75012000A
     VDD_CORE_V volt(15)=0.89745940V
        EXT5V_V volt(24)=5.06788000V

A rail's current (``_A``) and voltage (``_V``) are paired by name, not by line order:
firmware releases list them in different orders and spell a rail differently (0V8_SW
or 0V8_SYS). The rails' sum of V x I misses the 5 V loads (USB, fan, HATs): jfikar's
RPi5-power fitted real_W = 1.1451 x sum + 0.5879 against a USB-C meter, the board's
estimate kept here beside the raw sum.

``vcgencmd`` costs more CPU than a whole tick of the other collectors: it is read at
most every ``VCGENCMD_EVERY_S`` (``Periodic``; the last reading is repeated in
between), as ``pi_throttling`` does. Off a Pi 5 (its device tree is not a BCM2712's,
or no ``vcgencmd``) the collector is ``Unavailable``, found without spawning anything.
No Pi 5 here: tests pass a fake device-tree ``compatible`` file to the constructor (or
put it under ``$EDGEPROF_SYSFS_ROOT``) and a fake ``vcgencmd`` on PATH (or in
``$EDGEPROF_VCGENCMD``) that prints jfikar's published output.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from .base import (Collector, Field, Periodic, Sample, Unavailable, system_path,
                   vcgencmd_path)

# jfikar/RPi5-power (README): board watts against a USB-C meter, from the rails' sum.
BOARD_FIT_SLOPE = 1.1451
BOARD_FIT_OFFSET_W = 0.5879
_LINE = re.compile(r"^\s*(?P<rail>\S+)_(?P<kind>[AV])\s+(?:current|volt)\(\d+\)="
                   r"(?P<value>[-+0-9.eE]+)[AV]\s*$")
COMPATIBLE = Path("/proc/device-tree/compatible")  # under $EDGEPROF_SYSFS_ROOT when set
PI5_SOC = b"brcm,bcm2712"
INPUT_RAIL = "EXT5V"  # the 5 V input: a voltage with no current, not a rail of the sum


def parse_pmic(text: str) -> dict[str, tuple[float, float]]:
    """``{rail: (amps, volts)}`` of every rail with both readings (EXT5V_V, with no
    current, is left out: see ``input_volts``)."""
    amps: dict[str, float] = {}
    volts: dict[str, float] = {}
    for line in text.splitlines():
        match = _LINE.match(line)
        if match:
            (amps if match["kind"] == "A" else volts)[match["rail"]] = float(match["value"])
    return {rail: (amps[rail], volts[rail]) for rail in amps if rail in volts}


def input_volts(text: str) -> float | None:
    """EXT5V_V, the board's 5 V input, or None when the output has none."""
    for line in text.splitlines():
        match = _LINE.match(line)
        if match and match["rail"] == INPUT_RAIL and match["kind"] == "V":
            return float(match["value"])
    return None


def board_watts(rails_w: float) -> float:
    """The whole board's watts from the rails' sum (jfikar's fit)."""
    return BOARD_FIT_SLOPE * rails_w + BOARD_FIT_OFFSET_W


class Pi5Pmic(Collector):
    FIELDS = (
        Field("power_pmic", "rails_w", "W", "sum of V x I over the PMIC's rails (misses "
                                           "the 5 V loads: USB, fan, HATs)"),
        Field("power_pmic", "board_w", "W", f"the board's power estimated from rails_w: "
                                           f"{BOARD_FIT_SLOPE} x rails_w + "
                                           f"{BOARD_FIT_OFFSET_W} (jfikar/RPi5-power's fit "
                                           "against a USB-C meter)"),
        Field("power_pmic", "ext5v_v", "V", "the 5 V input's voltage (EXT5V_V)"),
        Field("power_pmic", "rails", "count", "rails with both current and voltage (int; "
                                              "12 on a Pi 5)"),
    )
    VCGENCMD_EVERY_S = 5.0
    VCGENCMD_TIMEOUT_S = 5.0

    def __init__(self, vcgencmd: str | None = None, compatible: Path | None = None):
        # The board is known from its device tree, without spawning anything: only a
        # BCM2712 (Pi 5, CM5, Pi 500) has this PMIC.
        compatible = system_path(COMPATIBLE) if compatible is None else compatible
        try:
            soc = compatible.read_bytes().split(b"\0")
        except OSError:
            soc = []
        if PI5_SOC not in soc:
            raise Unavailable("Pi 5 PMIC power (not a BCM2712 board)")
        self.vcgencmd = vcgencmd or vcgencmd_path()
        if not self.vcgencmd:
            raise Unavailable("Pi 5 PMIC power (no vcgencmd)")
        # A vcgencmd that fails or hangs is tried again only after VCGENCMD_EVERY_S (the
        # sampler logs the error once).
        self._reading = Periodic(self.VCGENCMD_EVERY_S, self._read)

    def _read(self) -> dict[str, float | int]:
        text = subprocess.run([self.vcgencmd, "pmic_read_adc"], capture_output=True,
                              text=True, timeout=self.VCGENCMD_TIMEOUT_S, check=True).stdout
        rails = parse_pmic(text)
        if not rails:
            raise ValueError(f"no rails in its output ({text.strip()[:80]!r})")
        rails_w = sum(a * v for a, v in rails.values())
        fields: dict[str, float | int] = {"rails_w": rails_w, "board_w": board_watts(rails_w),
                                          "rails": len(rails)}
        volts = input_volts(text)
        if volts is not None:
            fields["ext5v_v"] = volts
        return fields

    def collect(self) -> list[Sample]:
        fields = self._reading()
        return [] if fields is None else [("power_pmic", {}, dict(fields))]
