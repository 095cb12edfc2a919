"""The agent at the monitors' cost: what each of its entry points imports, and its RSS.

Every way a node starts the agent is checked in a fresh interpreter: its command
module (``profiler.agent.cli``), ``edgeprof agent`` through the lazy ``edgeprof`` group,
and real processes started as ``python -m profiler.agent``, as the ``edgeprof`` console
script and as the systemd unit's ExecStart line rendered from the playbook's template.
An agent that ships (``--influx-url``) loads its shipper too, and still nothing of the
controller.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import jinja2
import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "ansible" / "roles" / "agent" / "templates" / "edgeprof-agent.service.j2"
HEAVY = ("numpy", "yaml", "jinja2", "influxdb_client", "requests", "tqdm", "matplotlib",
         "mxnet", "torch")
# What the agent may import of edgeprof besides its own package: tiny shared modules.
SHARED = {"profiler", "profiler.errors", "profiler.cli_errors", "profiler.cgroupfs",
          "profiler.plugins"}
# What its shipper adds: the state files' atomic writes and the token file's check.
SHIPPER_SHARED = {"profiler.fsutil", "profiler.secrets"}
# The shipper's writers and what they load: only an agent given --influx-url imports them.
SHIPPER = ("profiler.agent.shipping.ship", "profiler.agent.shipping.targets",
           "profiler.agent.shipping.backoff", "profiler.agent.shipping.cli")
RSS_MAX_MB = 25.0


def _loaded_after(code: str) -> list[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json\n"
                          "print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout
    return json.loads(out.splitlines()[-1])


def test_the_agent_command_imports_only_the_agent():
    loaded = _loaded_after("import profiler.agent.cli")
    ours = [m for m in loaded if m.split(".")[0] in ("profiler", "workloads")]
    outside = [m for m in ours if m not in SHARED and not m.startswith("profiler.agent")]
    assert outside == [], outside
    assert [m for m in loaded if m.split(".")[0] in HEAVY] == []
    # Of the shipping package, only its options (plain Click) until it ships.
    assert [m for m in ours if m.startswith(SHIPPER)] == []


def test_an_agent_that_ships_imports_its_shipper_and_nothing_of_the_controller():
    """What ``edgeprof agent --influx-url`` loads: the command, the shipper, both writers
    made (they import influxdb-client and requests when made), and no controller module."""
    loaded = _loaded_after(
        "import profiler.agent.cli\n"
        "from profiler.agent.shipping.ship import LiveShipper\n"
        "from profiler.agent.shipping.targets import InfluxTarget, target_from_options\n"
        "for target in (InfluxTarget(url='http://127.0.0.1:9', db='edgeprof'),\n"
        "               InfluxTarget(url='http://127.0.0.1:9', org='lab', bucket='b')):\n"
        "    target.writer().close()")
    ours = [m for m in loaded if m.split(".")[0] in ("profiler", "workloads")]
    outside = [m for m in ours if m not in SHARED | SHIPPER_SHARED
               and not m.startswith("profiler.agent")]
    assert outside == [], outside
    assert {"influxdb_client", "requests"} <= set(loaded)
    # influxdb-client imports NumPy itself (when installed); nothing else heavy comes.
    allowed = {"influxdb_client", "requests", "numpy"}
    assert [m for m in loaded if m.split(".")[0] in set(HEAVY) - allowed] == []


def test_edgeprof_agent_loads_no_other_command():
    loaded = _loaded_after(
        "import click\nfrom profiler.cli import cli\n"
        "assert cli.get_command(click.Context(cli), 'agent').name == 'agent'")
    assert [m for m in loaded if m.split(".")[0] in HEAVY] == []
    others = ("profiler.metrics", "profiler.report", "profiler.dashboards", "profiler.study",
              "profiler.calibrate", "profiler.data", "profiler.sweep.sweep", *SHIPPER)
    assert [m for m in loaded if m.startswith(others)] == []


def _unit_argv(tmp_path: Path) -> list[str]:
    """The systemd unit's ExecStart, rendered as the playbook renders it (no InfluxDB)."""
    text = jinja2.Template(UNIT.read_text()).render(
        ansible_managed="test", edgeprof_user="root", inventory_hostname="pi1",
        edgeprof_venv=str(Path(sys.executable).parent.parent),
        edgeprof_spool_dir=str(tmp_path / "unit"), edgeprof_agent_interval_s=0.2,
        edgeprof_interface="lo", edgeprof_influx_credentials="")
    exec_start = next(line for line in text.splitlines() if line.startswith("ExecStart="))
    return shlex.split(exec_start.removeprefix("ExecStart="))


def test_every_entry_point_stays_under_25_mb(tmp_path):
    common = ["--node", "n1", "--interval", "0.2", "--interfaces", "lo", "--spool"]
    console_script = Path(sys.executable).parent / "edgeprof"
    if not console_script.exists():
        pytest.fail(f"{console_script} is missing: install edgeprof (scripts/setup.sh)")
    argvs = {
        "python -m profiler.agent": [sys.executable, "-m", "profiler.agent", *common,
                                     str(tmp_path / "module")],
        "edgeprof agent": [str(console_script), "agent", *common, str(tmp_path / "cli")],
        "systemd unit": _unit_argv(tmp_path),
    }
    spools = {"python -m profiler.agent": tmp_path / "module",
              "edgeprof agent": tmp_path / "cli", "systemd unit": tmp_path / "unit"}
    procs = {name: subprocess.Popen(argv, cwd=ROOT, stderr=subprocess.DEVNULL)
             for name, argv in argvs.items()}
    try:
        deadline = time.monotonic() + 30
        rss_mb = {}
        for name, proc in procs.items():
            # Measured once it has sampled a few ticks: everything it needs is loaded.
            while sum(1 for _ in spools[name].glob("seg-*.lp")) == 0 or \
                    len(next(spools[name].glob("seg-*.lp")).read_text().splitlines()) < 30:
                assert proc.poll() is None and time.monotonic() < deadline, name
                time.sleep(0.1)
            rss_mb[name] = psutil.Process(proc.pid).memory_info().rss / 2**20
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            proc.wait(timeout=10)
    assert all(value <= RSS_MAX_MB for value in rss_mb.values()), rss_mb
