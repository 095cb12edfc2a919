"""edgeprof as a user installs it, not as a checkout: a wheel built from this tree and
installed into a folder of its own finds what it ships beside its code.

The wheel is built from a copy of the tree (pip builds in place, and the checkout stays
clean), without build isolation or dependencies (nothing is downloaded), and installed
with ``pip install --no-deps --target``. ``edgeprof dashboards push`` then runs from that
folder alone (``python -I``: no PYTHONPATH, no checkout on the path, run from an empty
folder) against the stand-in for Grafana's API (``tests.support.fake_grafana``), and
must push the committed dashboards: ``profiler/dashboards/*.json`` are package data.
About 5 s.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.support.fake_grafana import FakeGrafana

pytestmark = pytest.mark.integration
BOARDS_DIR = ROOT / "profiler" / "dashboards"  # the committed dashboards
# What setup.cfg builds the distribution from.
SOURCES = ("setup.cfg", "pyproject.toml", "README.md", "edgeprof_hooks.py", "profiler",
           "workloads")
TOKEN = "glsa_wheel-test-token"


def _pip(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True,
                          text=True, timeout=120,
                          env={**os.environ, "PIP_NO_INDEX": "1",
                               "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The folder a wheel of this tree was installed into."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    source.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, source / name)
    _pip("wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(work / "dist"),
         str(source))
    (wheel,) = (work / "dist").glob("edgeprof-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        shipped = {name for name in archive.namelist() if name.startswith("profiler/dashboards/")
                   and name.endswith(".json")}
        assert shipped == {f"profiler/dashboards/{p.name}" for p in BOARDS_DIR.glob("*.json")}
        for name in shipped:
            assert archive.read(name) == (ROOT / name).read_bytes(), name
    _pip("install", "-q", "--no-deps", "--no-compile", "--target", str(work / "site"),
         str(wheel))
    return work / "site"


def test_the_installed_package_pushes_its_own_dashboards(installed, tmp_path):
    code = ("import sys\n"
            f"sys.path.insert(0, {str(installed)!r})\n"
            "import profiler\n"
            f"assert profiler.__file__.startswith({str(installed)!r}), profiler.__file__\n"
            "from profiler.cli import main\n"
            "sys.argv = ['edgeprof', *sys.argv[1:]]\n"
            "main()\n")
    with FakeGrafana(token=TOKEN) as grafana:
        done = subprocess.run(
            [sys.executable, "-I", "-c", code, "dashboards", "push", "--grafana-url",
             grafana.url, "--influx-url", "http://influx:8086"],
            cwd=tmp_path, capture_output=True, text=True, timeout=60,
            env={**os.environ, "GRAFANA_TOKEN": TOKEN, "INFLUX_TOKEN": "reader:secret"})
        assert done.returncode == 0, done.stdout + done.stderr
        pushed = sorted(r.body["dashboard"]["uid"] for r in grafana.writes()
                        if r.path == "/api/dashboards/db")
    assert pushed == sorted(json.loads(p.read_text())["uid"]
                            for p in BOARDS_DIR.glob("*.json"))
    assert pushed  # the two dashboards, not an empty folder
