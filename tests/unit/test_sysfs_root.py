"""The hardware collectors read a whole fake board under ``$EDGEPROF_SYSFS_ROOT``.

Golden-file cases in the manner of Telegraf's ``testcases/<case>/``: each case is a board's
/sys and /proc/device-tree files (built in ``tmp_path`` from the dicts below, some with
NUL bytes) and the points a real ``Sampler`` must write from them, as text. The
``vcgencmd`` is a script named by ``$EDGEPROF_VCGENCMD`` and not on PATH, printing
jfikar's published ``pmic_read_adc`` output; PATH has none. Nothing is patched in the collectors'
modules: a wrong path in any of them reads this host instead, which has none of these
files, and the case fails.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from profiler.agent.collectors import base
from profiler.agent.sampler import AgentConfig, Sampler
from profiler.agent.spool_reader import read_points

from tests.unit.test_power_collectors import JFIKAR

HARDWARE = {"thermal", "throttle", "cpu_freq", "power_pmic", "power_hwmon", "power_rapl"}

CASES = {
    # A Pi 5 under load, throttled by an under-voltage; an INA219 on its 5 V input.
    "pi5": ({
        "proc/device-tree/compatible": b"raspberrypi,5-model-b\0brcm,bcm2712\0",
        "sys/devices/platform/soc/soc:firmware/get_throttled": "0x50005",
        "sys/devices/system/cpu/cpufreq/policy0/scaling_cur_freq": "1500000",
        "sys/class/hwmon/hwmon0/name": "cpu_thermal",
        "sys/class/hwmon/hwmon0/temp1_input": "61250",
        "sys/class/hwmon/hwmon1/name": "rp1_adc",
        "sys/class/hwmon/hwmon1/temp1_input": "52100",
        "sys/class/hwmon/hwmon1/temp2_input": "54300",
        "sys/class/hwmon/hwmon2/name": "ina219",
        "sys/class/hwmon/hwmon2/power1_input": "5100000",
        # Read only where hwmon has no temperature at all.
        "sys/class/thermal/thermal_zone0/type": "cpu-thermal",
        "sys/class/thermal/thermal_zone0/temp": "99000",
    }, """\
cpu_freq freq_mhz=1500
power_hwmon,channel=1,monitor=ina219/hwmon2 power_w=5.1
power_pmic board_w=12.9549,ext5v_v=5.06788,rails=12,rails_w=10.7999
thermal,sensor=cpu_thermal temp_c=61.25
thermal,sensor=rp1_adc temp_c=54.3
throttle flags=327685,freq_capped=false,freq_capped_occurred=false,soft_temp_limit=false,\
soft_temp_limit_occurred=false,throttled=true,throttled_occurred=true,under_voltage=true,\
under_voltage_occurred=true
"""),
    # An x86 host with two cpufreq policies, RAPL, and thermal zones but no hwmon sensor.
    "x86": ({
        "proc/device-tree/compatible": b"",  # not a Pi: neither vcgencmd collector runs
        "sys/devices/system/cpu/cpufreq/policy0/scaling_cur_freq": "2400000",
        "sys/devices/system/cpu/cpufreq/policy1/scaling_cur_freq": "800000",
        "sys/class/powercap/intel-rapl:0/name": "package-0",
        "sys/class/powercap/intel-rapl:0/max_energy_range_uj": "262143328850",
        "sys/class/powercap/intel-rapl:0/energy_uj": "1000",
        "sys/class/powercap/intel-rapl:0:0/name": "core",
        "sys/class/powercap/intel-rapl:0:0/max_energy_range_uj": "262143328850",
        "sys/class/powercap/intel-rapl:0:0/energy_uj": "1000",
        "sys/class/hwmon/hwmon0/name": "acpi_fan",
        "sys/class/thermal/thermal_zone0/type": "x86_pkg_temp",
        "sys/class/thermal/thermal_zone0/temp": "47000",
        "sys/class/thermal/thermal_zone1/type": "acpitz",
        "sys/class/thermal/thermal_zone1/temp": "27800",
    }, """\
cpu_freq freq_mhz=1600
power_rapl,domain=package-0 energy_uj=1000,power_w=0
thermal,sensor=acpitz temp_c=27.8
thermal,sensor=x86_pkg_temp temp_c=47
"""),
}


def _tree(root: Path, files: dict[str, str | bytes]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content + "\n")


def _line(point) -> str:
    def value(v):
        return str(v).lower() if isinstance(v, bool) else f"{v:.6g}"
    tags = "".join(f",{k}={v}" for k, v in sorted(point.tags.items()) if k != "role")
    fields = ",".join(f"{k}={value(v)}" for k, v in sorted(point.fields.items()))
    return f"{point.measurement}{tags} {fields}"


@pytest.mark.parametrize("case", sorted(CASES))
def test_collectors_read_the_board_under_the_root(case, tmp_path, monkeypatch):
    files, expected = CASES[case]
    _tree(tmp_path / "root", files)
    monkeypatch.setenv(base.SYSFS_ROOT_ENV, str(tmp_path / "root"))
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # no vcgencmd on PATH
    if case == "pi5":
        vcgencmd = tmp_path / "firmware" / "vcgencmd"
        vcgencmd.parent.mkdir()
        (tmp_path / "pmic.txt").write_text(JFIKAR)
        # get_throttled is answered from sysfs: the firmware is asked for the PMIC only.
        vcgencmd.write_text('#!/bin/sh\n'
                            f'[ "$1" = pmic_read_adc ] && /bin/cat {tmp_path}/pmic.txt\n')
        vcgencmd.chmod(0o755)
        monkeypatch.setenv(base.VCGENCMD_ENV, str(vcgencmd))
    sampler = Sampler(AgentConfig(node="board", spool_dir=tmp_path / "spool",
                                  interval_s=0.1, interfaces=["lo"]))
    sampler.tick()
    sampler.spool.close()
    got = sorted(_line(p) for _, p in read_points(tmp_path / "spool", HARDWARE))
    assert "\n".join(got) + "\n" == expected


def test_the_settings_are_read_when_the_collectors_are_built(tmp_path, monkeypatch):
    monkeypatch.setenv(base.SYSFS_ROOT_ENV, str(tmp_path))
    assert base.system_path("/sys/class/hwmon") == tmp_path / "sys/class/hwmon"
    assert base.system_path(Path("/proc/device-tree/compatible")) == (
        tmp_path / "proc/device-tree/compatible")
    monkeypatch.setenv(base.SYSFS_ROOT_ENV, "")
    assert base.system_path("/sys/block") == Path("/sys/block")
    # A vcgencmd setting that names nothing is said, not taken for a board without one.
    monkeypatch.setenv(base.VCGENCMD_ENV, str(tmp_path / "missing"))
    with pytest.raises(base.Unavailable, match="EDGEPROF_VCGENCMD"):
        base.vcgencmd_path()
    monkeypatch.setenv(base.VCGENCMD_ENV, "sh")  # a name is looked up on PATH
    assert Path(base.vcgencmd_path()).name == "sh"
