"""Power collectors against the files and commands of boards this machine is not.

No Pi 5, no power monitor and no RAPL here: the Pi 5 collector reads a fake device-tree
``compatible`` file and a fake ``vcgencmd`` on PATH that prints the ``pmic_read_adc``
output published in jfikar/RPi5-power's README (and, in a second firmware's spelling,
in Jeff Geerling's Pi 5 notes); hwmon and powercap are fake sysfs trees whose root is
passed to the constructors. Each missing-hardware case is ``Unavailable`` (logged once at
INFO by ``build``), never a warning.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest

from profiler.agent import collectors as c
from profiler.agent.collectors import hwmon_power, pi5_pmic, rapl
from profiler.agent.sampler import AgentConfig, Sampler
from profiler.agent.spool_reader import read_points

# jfikar/RPi5-power README: a Pi 5 under load (VDD_CORE at 10.9 A).
JFIKAR = """\
 3V7_WL_SW_A current(0)=0.00000000A
   3V3_SYS_A current(1)=0.06245952A
   1V8_SYS_A current(2)=0.16102850A
  DDR_VDD2_A current(3)=0.00780744A
  DDR_VDDQ_A current(4)=0.00000000A
   1V1_SYS_A current(5)=0.17566740A
    0V8_SW_A current(6)=0.32791250A
  VDD_CORE_A current(7)=10.87674000A
   3V3_DAC_A current(17)=0.00036630A
   3V3_ADC_A current(18)=0.00042735A
   0V8_AON_A current(16)=0.00579975A
      HDMI_A current(22)=0.01367520A
 3V7_WL_SW_V volt(8)=3.79999600V
   3V3_SYS_V volt(9)=3.30632200V
   1V8_SYS_V volt(10)=1.79828900V
  DDR_VDD2_V volt(11)=1.10292900V
  DDR_VDDQ_V volt(12)=0.60476130V
   1V1_SYS_V volt(13)=1.10439400V
    0V8_SW_V volt(14)=0.80256330V
  VDD_CORE_V volt(15)=0.89745940V
   3V3_DAC_V volt(20)=3.30494200V
   3V3_ADC_V volt(21)=3.30219400V
   0V8_AON_V volt(19)=0.79736190V
      HDMI_V volt(23)=5.07056000V
     EXT5V_V volt(24)=5.06788000V
      BATT_V volt(25)=3.01110800V
"""
JFIKAR_RAILS_W = 10.7999  # sum of V x I over the twelve rails, worked out by hand


def _pi5(tmp_path: Path, monkeypatch, output: str, status: int = 0) -> Path:
    """A BCM2712 device tree and a ``vcgencmd`` printing ``output``; returns its call log."""
    compatible = tmp_path / "compatible"
    compatible.write_bytes(b"raspberrypi,5-model-b\0brcm,bcm2712\0")
    monkeypatch.setattr(pi5_pmic, "COMPATIBLE", compatible)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "out.txt").write_text(output)
    calls = tmp_path / "calls"
    script = bin_dir / "vcgencmd"
    # The throttling collector asks it too: a Pi 5 that is not throttled.
    script.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\n"
                      'if [ "$1" = get_throttled ]; then echo throttled=0x0; exit 0; fi\n'
                      f"cat {tmp_path / 'out.txt'}\nexit {status}\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return calls


def test_pmic_rails_are_paired_by_name_and_summed():
    rails = pi5_pmic.parse_pmic(JFIKAR)
    assert len(rails) == 12 and "EXT5V" not in rails and "BATT" not in rails
    assert rails["VDD_CORE"] == (10.87674, 0.8974594)
    assert sum(a * v for a, v in rails.values()) == pytest.approx(JFIKAR_RAILS_W, abs=1e-3)
    assert pi5_pmic.input_volts(JFIKAR) == 5.06788
    # Lines in another order, another firmware's rail name (0V8_SYS): same pairing.
    shuffled = "\n".join(reversed(JFIKAR.replace("0V8_SW", "0V8_SYS").splitlines()))
    assert pi5_pmic.parse_pmic(shuffled)["0V8_SYS"] == (0.3279125, 0.8025633)
    assert pi5_pmic.parse_pmic('error=1 error_msg="Command not registered"') == {}


def test_pi5_collector_gives_rails_and_board_watts(tmp_path, monkeypatch):
    calls = _pi5(tmp_path, monkeypatch, JFIKAR)
    sampler = Sampler(AgentConfig(node="pi5", spool_dir=tmp_path / "spool", interval_s=0.1,
                                  interfaces=["lo"]))
    assert any(isinstance(x, c.Pi5Pmic) for x in sampler.collectors)
    for _ in range(3):
        sampler.tick()
    sampler.spool.close()
    points = [p for _, p in read_points(tmp_path / "spool") if p.measurement == "power_pmic"]
    assert len(points) == 3
    fields = points[0].fields
    assert fields["rails_w"] == pytest.approx(JFIKAR_RAILS_W, abs=1e-3)
    # jfikar's fit: 1.1451 x 10.800 + 0.5879 = 12.955 W at the wall.
    assert fields["board_w"] == pytest.approx(1.1451 * JFIKAR_RAILS_W + 0.5879, abs=1e-3)
    assert fields["ext5v_v"] == 5.06788 and fields["rails"] == 12
    # Read once for three ticks: vcgencmd at most every VCGENCMD_EVERY_S.
    assert calls.read_text().splitlines().count("pmic_read_adc") == 1


def test_pi5_firmware_without_the_command_costs_one_warning(tmp_path, monkeypatch, caplog):
    _pi5(tmp_path, monkeypatch, 'error=1 error_msg="Command not registered"\n', status=0)
    pmic = c.Pi5Pmic()
    sampler = Sampler(AgentConfig(node="pi5", spool_dir=tmp_path / "spool", interval_s=0.1,
                                  interfaces=["lo"]))
    with pytest.raises(ValueError, match="no rails"):
        pmic.collect()
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert sampler.tick() > 0
    sampler.spool.close()
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "Pi5Pmic" in warned[0]


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")


def test_hwmon_reads_power_or_volts_times_amps_of_monitors_only(tmp_path):
    _write(tmp_path, {
        # An INA219 on the board's 5 V input: power1_input in microwatts.
        "hwmon0/name": "ina219", "hwmon0/power1_input": "4250000",
        "hwmon0/in0_input": "12", "hwmon0/in1_input": "5100", "hwmon0/curr1_input": "833",
        # An INA3221: three channels of bus mV and mA, no power files.
        "hwmon1/name": "ina3221", "hwmon1/in1_input": "5000", "hwmon1/curr1_input": "400",
        "hwmon1/in2_input": "3300", "hwmon1/curr2_input": "100",
        # Not a board's power: a GPU and a temperature sensor.
        "hwmon2/name": "amdgpu", "hwmon2/power1_input": "50000000",
        "hwmon3/name": "cpu_thermal", "hwmon3/temp1_input": "45000"})
    collector = c.HwmonPower(root=tmp_path)
    samples = collector.collect()
    by_channel = {(t["monitor"], t["channel"]): f for _, t, f in samples}
    assert set(by_channel) == {("ina219/hwmon0", "1"), ("ina3221/hwmon1", "1"),
                               ("ina3221/hwmon1", "2")}
    assert by_channel[("ina219/hwmon0", "1")] == {"power_w": 4.25, "voltage_v": 5.1,
                                                  "current_a": 0.833}
    assert by_channel[("ina3221/hwmon1", "1")]["power_w"] == pytest.approx(2.0)
    assert by_channel[("ina3221/hwmon1", "2")]["power_w"] == pytest.approx(0.33)
    (tmp_path / "hwmon0" / "power1_input").write_text("6000000\n")  # read every tick
    assert collector.collect()[0][2]["power_w"] == 6.0


def _powercap(root: Path, energy_uj: dict[str, int], max_uj: int = 262_143_328_850) -> None:
    zones = {"intel-rapl:0": "package-0", "intel-rapl:0:0": "core",
             "intel-rapl:0:2": "dram", "intel-rapl:1": "psys"}
    (root / "intel-rapl").mkdir(parents=True, exist_ok=True)  # the control type, no zone
    for zone, name in zones.items():
        _write(root, {f"{zone}/name": name, f"{zone}/max_energy_range_uj": str(max_uj),
                      f"{zone}/energy_uj": str(energy_uj.get(name, 0))})


def test_rapl_gives_package_and_dram_watts_across_a_wrap(tmp_path, monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    max_uj = 1_000_000_000
    _powercap(tmp_path, {"package-0": max_uj - 5_000_000, "dram": 100}, max_uj)
    collector = c.Rapl(root=tmp_path)
    assert [z.domain for z in collector.zones] == ["package-0", "package-0/dram"]
    clock[0] += 2.0
    # 2 s later: the package counter wrapped (5 J to the top, 15 J past zero: 20 J),
    # DRAM used 3 J.
    _powercap(tmp_path, {"package-0": 14_999_999, "dram": 3_000_100}, max_uj)
    watts = {t["domain"]: f["power_w"] for _, t, f in collector.collect()}
    assert watts == {"package-0": pytest.approx(10.0), "package-0/dram": pytest.approx(1.5)}


def test_missing_hardware_is_unavailable_without_a_warning(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(pi5_pmic, "COMPATIBLE", tmp_path / "no-device-tree")
    monkeypatch.setattr(hwmon_power, "HWMON_ROOT", tmp_path / "hwmon")
    monkeypatch.setattr(rapl, "POWERCAP_ROOT", tmp_path / "powercap")
    _write(tmp_path, {"hwmon/hwmon0/name": "coretemp", "hwmon/hwmon0/temp1_input": "1"})
    (tmp_path / "powercap").mkdir()
    with caplog.at_level(logging.INFO):
        sampler = Sampler(AgentConfig(node="x86", spool_dir=tmp_path / "spool",
                                      interval_s=0.1, interfaces=["lo"]))
        sampler.tick()
    sampler.spool.close()
    assert not any(isinstance(x, (c.Pi5Pmic, c.HwmonPower, c.Rapl))
                   for x in sampler.collectors)
    said = [r.getMessage() for r in caplog.records if "power" in r.getMessage()]
    assert len(said) == 3 and all(r.levelno == logging.INFO for r in caplog.records
                                  if "power" in r.getMessage())
    # A Pi 4 has vcgencmd but not this chip: unavailable, vcgencmd never spawned.
    (tmp_path / "compatible").write_bytes(b"raspberrypi,4-model-b\0brcm,bcm2711\0")
    with pytest.raises(c.Unavailable, match="not a BCM2712"):
        c.Pi5Pmic(vcgencmd="/nonexistent/vcgencmd", compatible=tmp_path / "compatible")
    # RAPL counters readable by root only (Linux 5.10 on).
    _powercap(tmp_path / "locked", {"package-0": 1})
    (tmp_path / "locked" / "intel-rapl:0" / "energy_uj").chmod(0)
    if os.geteuid() != 0:
        with pytest.raises(c.Unavailable, match="root only"):
            c.Rapl(root=tmp_path / "locked")
