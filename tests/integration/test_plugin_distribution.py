"""A plugin distribution, installed into a venv by pip, sweeps without touching the tree.

The distribution is written here at test time (``tests.support.plugin_dist``): a
``pyproject.toml`` whose entry points name an engine (torch-ddp under another name), a
node provider (the local cluster under another name), a study and, in a module of its
own as the agent wants it, a collector. A fresh venv (``python -m venv``) sees the
project's environment through a ``.pth`` file (its dependencies and this checkout, as an
editable install of edgeprof would), and ``pip install`` puts the plugin in it as a user
would. ``edgeprof sweep`` in that venv then runs a real cell with the plugin's engine on
the plugin's provider, its agent writing the plugin collector's points, and ``edgeprof
study`` lists the plugin's study. A broken plugin beside it costs the commands that do
not name it nothing and the one that does one line and exit 2.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.conftest import ROOT, need
from tests.support.plugin_dist import write_installed, write_project

pytestmark = pytest.mark.integration

ENGINE_MODULE = """
    from profiler.cluster.local import LocalCluster, LocalSettings
    from profiler.engines.pytorch import TorchDDPEngine
    from profiler.study.base import Study


    class SoloEngine(TorchDDPEngine):
        name = "ddp-solo"
        description = "torch-ddp under another name (a plugin)"


    class SoloCluster(LocalCluster):
        name = "local-solo"


    class SoloSettings(LocalSettings):
        name = "local-solo"
        help = "processes here (a plugin)"

        @classmethod
        def cluster_type(cls):
            return SoloCluster

        def open(self, needs):
            return self.closing(SoloCluster(needs.nodes))


    class SoloStudy(Study):
        name = "solo-study"
        description = "A study from a plugin."
"""

# The agent imports what a collector's entry point names: a module of its own, which
# imports nothing of the controller.
COLLECTOR_MODULE = """
    import time

    from profiler.agent.collectors import Collector, Field


    class Uptime(Collector):
        FIELDS = (Field("solo", "uptime_s", "s", "seconds since the agent built it"),)

        def __init__(self):
            self.start = time.monotonic()

        def collect(self):
            return [("solo", {}, {"uptime_s": time.monotonic() - self.start})]
"""


def _tree_state() -> str:
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"],
                          cwd=ROOT, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A venv holding the plugin, installed by pip; its python."""
    need("torch (scripts/setup.sh installs its CPU build)",
         importlib.util.find_spec("torch") is not None)
    root = tmp_path_factory.mktemp("plugin")
    source = write_project(root / "edgeprof-solo", "edgeprof-solo", {
        "edgeprof.engines": {"ddp-solo": "edgeprof_solo:SoloEngine"},
        "edgeprof.providers": {"local-solo": "edgeprof_solo:SoloSettings"},
        "edgeprof.studies": {"solo-study": "edgeprof_solo:SoloStudy"},
        "edgeprof.collectors": {"uptime": "edgeprof_solo_agent:Uptime"},
    }, {"edgeprof_solo": ENGINE_MODULE, "edgeprof_solo_agent": COLLECTOR_MODULE})
    env_dir = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; "
                              "print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    # The project's environment (its dependencies, pip and setuptools), seen from the venv.
    (Path(purelib) / "edgeprof-project.pth").write_text(
        f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-build-isolation", "--no-index", str(source)],
                   check=True, cwd=root, timeout=120)
    assert (Path(purelib) / "edgeprof_solo.py").exists()
    return python


def _edgeprof(python: Path, *args: str, path: tuple[Path, ...] = (), cwd: Path,
              timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m profiler.cli ARGS`` with this checkout's edgeprof (and ``path``)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, (ROOT, *path)))}
    return subprocess.run([str(python), "-m", "profiler.cli", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def test_a_sweep_runs_the_installed_plugins_engine_on_its_provider(venv, tmp_path):
    before = _tree_state()
    shown = _edgeprof(venv, "sweep", "--help", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    text = "".join(shown.stdout.split())  # Click wraps at 80 columns, hyphens included
    assert "ddp-solo:torch-ddpunderanothername(aplugin)" in text
    assert "local-solo(processeshere(aplugin))" in text

    out = tmp_path / "sweep"
    done = _edgeprof(venv, "sweep", "--engine", "ddp-solo", "--cluster", "local-solo",
                     "--model", "lenet-mlp", "--devices", "1", "--batch", "32",
                     "--max-samples", "256", "--val-samples", "200", "--interval", "0.5",
                     "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "plugin" not in done.stderr  # nothing refused
    [record] = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert record["status"] == "ok", record.get("reason")
    assert (record["engine"], record["cluster"]) == ("ddp-solo", "local-solo")
    assert record["samples_per_s"] > 0 and 0 <= record["val_accuracy"] <= 1
    meta = json.loads((out / "sweep.json").read_text())
    assert meta["identity"]["cluster"] == "local-solo"
    assert meta["versions"]["edgeprof-solo"] == "0.1"  # the plugin's, beside torch's
    assert "torch" in meta["versions"]
    # The agent beside the cell built the plugin's collector after its own.
    spool = "".join(p.read_text() for p in out.glob("cells/*/attempt-1/metrics/*/seg-*.lp"))
    assert [line for line in spool.splitlines() if line.startswith("solo,")]
    assert _tree_state() == before  # nothing of the plugin in the checkout


def test_the_installed_plugins_study_is_a_command(venv, tmp_path):
    listed = _edgeprof(venv, "study", "--help", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "solo-study" in listed.stdout and "park2019" in listed.stdout
    shown = _edgeprof(venv, "study", "solo-study", "--help", cwd=tmp_path)
    assert shown.returncode == 0 and "A study from a plugin." in shown.stdout, shown.stderr


def test_a_broken_plugin_costs_only_the_command_that_names_it(venv, tmp_path):
    site = tmp_path / "site"
    write_installed(site, "edgeprof-broken", {
        "edgeprof.engines": {"broken": "edgeprof_broken:Engine"},
    }, {"edgeprof_broken": "import edgeprof_not_installed\n"})
    line = ("plugin engine 'broken' of edgeprof-broken 0.1 does not load "
            "(edgeprof_broken:Engine: ModuleNotFoundError: No module named "
            "'edgeprof_not_installed'): fix or reinstall it, or pip uninstall edgeprof-broken")
    helped = _edgeprof(venv, "--help", path=(site,), cwd=tmp_path)
    assert helped.returncode == 0 and "sweep" in helped.stdout, helped.stderr
    shown = _edgeprof(venv, "sweep", "--help", path=(site,), cwd=tmp_path)
    assert shown.returncode == 0 and "ddp-solo" in shown.stdout, shown.stderr
    assert line in shown.stderr.splitlines()  # said, not fatal

    named = _edgeprof(venv, "run", "--engine", "broken", "--model", "lenet-mlp",
                      "--no-agent", "--out", str(tmp_path / "run"), path=(site,), cwd=tmp_path)
    assert named.returncode == 2
    assert named.stderr.strip().splitlines()[-1] == f"edgeprof: error: {line}"
    assert not (tmp_path / "run").exists()
