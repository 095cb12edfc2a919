"""A real ``torch-pipe`` sweep (local cluster, LeNet-5 in 2 stages, 4 micro-batches,
GPipe and 1F1B: two cells of ~10 s) through what a user reviews it with: the table the
sweep prints, ``edgeprof report`` (its pipeline section and figure, opened in headless
Chromium) and ``edgeprof compare``. A sweep without pipeline cells has no such section:
``tests/integration/test_report.py`` checks that on its own sweep."""

from __future__ import annotations

import csv
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, need, need_binary
from tests.integration.test_report import CHROMIUM, _chromium, _images, _not_blank
from tests.report_tables import number, rows

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
EDGEPROF = [sys.executable, "-m", "profiler.cli"]
SECTION = "<h2 id='pipeline'>"


def _edgeprof(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*EDGEPROF, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=240)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> tuple[Path, str]:
    """The sweep's folder and what it printed."""
    need("torch (scripts/setup.sh installs its CPU build)",
         importlib.util.find_spec("torch") is not None)
    out = tmp_path_factory.mktemp("pipe-report") / "sweep"
    done = _edgeprof("sweep", "--engine", "torch-pipe", "--model", "lenet-cnn", "--devices",
                     "2", "--batch", "32", "--microbatches", "4", "--schedule", "gpipe,1f1b",
                     "--max-samples", "320", "--dataset", "synthetic", "--interval", "0.5",
                     "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    return out, done.stdout


def _records(out: Path) -> dict[str, dict]:
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["status"] for r in records] == ["ok", "ok"], [r.get("reason") for r in records]
    return {r["schedule"]: r for r in records}


def test_the_sweeps_table_names_each_pipelines_shape(sweep):
    _out, printed = sweep
    lines = printed.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["model", "layers"])
    body = [line for line in lines[header + 2:header + 4]]
    assert any(line.split()[4:8] == ["sync", "torch-pipe", "S2", "M4"]
               and line.split()[8] == "gpipe" for line in body), printed
    assert any("torch-pipe S2 M4 1f1b" in line for line in body), printed


def test_report_shows_each_pipeline_cell_and_the_bubble_figure(sweep, tmp_path):
    out, _printed = sweep
    by_schedule = _records(out)
    done = _edgeprof("report", str(out))
    assert done.returncode == 0, done.stderr
    page = (out / "report.html").read_text()
    table = rows(page, SECTION)
    header, body = table[0], {row[0]: dict(zip(table[0], row)) for row in table[1:]}
    assert header[:3] == ["cell", "split (layers)", "compute ms"]
    assert len(body) == 2
    for schedule, record in by_schedule.items():
        row = body[f"lenet-cnn b32 x2 sync torch-pipe S2 M4 {schedule}"]
        split = [int(n) for n in row["split (layers)"].split(" / ")]
        assert split == [int(n) for n in record["pipe_split"].split(",")] and len(split) == 2
        compute = [number(v) for v in row["compute ms"].split(" / ")]
        assert compute == pytest.approx(record["stage_compute_ms"], abs=0.06)
        assert all(ms > 0 for ms in compute)
        assert number(row["bubble GPipe"]) == pytest.approx(1 / 5, abs=1e-3)  # (S-1)/(M+S-1)
        assert 0 <= number(row["bubble"]) < 1
        assert number(row["step ms"]) == pytest.approx(record["pipe_step_ms"], abs=0.06)
        assert number(row["step / predicted"]) == pytest.approx(
            record["pipe_step_ms"] / record["pipe_step_ms_predicted"], rel=0.01)
        assert len(row["stash MB"].split(" / ")) == 2
    # The cells table names the two cells apart too.
    cells = [row[0] for row in rows(page, "<h2>Cells</h2>")[1:]]
    assert sorted(cells) == sorted(body)

    figure = page.split('<figure id="fig-pipeline-bubble-step">', 1)
    assert len(figure) == 2, "no pipeline figure"
    png = _images(figure[1].split("</figure>", 1)[0])
    assert len(png) == 1 and _not_blank(png[0])
    assert (out / "report-figures" / "fig-pipeline-bubble-step.png").read_bytes() == png[0]

    need_binary(CHROMIUM)
    browser = _chromium((out / "report.html").as_uri(), tmp_path / "shot.png")
    assert browser.returncode == 0 and _not_blank((tmp_path / "shot.png").read_bytes())
    assert "CONSOLE" not in browser.stderr, browser.stderr
    dom = subprocess.run([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
                          "--dump-dom", (out / "report.html").as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    assert "Pipeline stages" in dom and 'id="fig-pipeline-bubble-step"' in dom


def test_compare_sets_pipeline_measures_beside_each_other(sweep, tmp_path):
    out, _printed = sweep
    csv_path = tmp_path / "ratios.csv"
    # With the schedule left out of the match, each cell is set beside the sweep's first
    # cell of its kind (GPipe's, the grid's first): 1F1B's row is 1F1B over GPipe.
    done = _edgeprof("compare", str(out), str(out), "--ignore", "schedule",
                     "--csv", str(csv_path))
    assert done.returncode == 0, done.stderr
    assert "bubble" in done.stdout.splitlines()[1] and "step/pred" in done.stdout
    by_schedule = _records(out)
    shown = {row["cell"]: row for row in csv.DictReader(csv_path.open())}
    row = shown["lenet-cnn b32 x2 sync torch-pipe S2 M4 1f1b"]
    gpipe, one_f = by_schedule["gpipe"], by_schedule["1f1b"]
    assert float(row["bubble_measured_a"]) == one_f["bubble_measured"]
    assert float(row["bubble_measured_b"]) == gpipe["bubble_measured"]
    assert float(row["pipe_step_ms_ratio"]) == pytest.approx(
        gpipe["pipe_step_ms"] / one_f["pipe_step_ms"], rel=1e-3)
    assert float(row["stage_stash_mb_max_a"]) == max(one_f["stage_stash_mb"])
    assert float(row["stage_stash_mb_max_b"]) == max(gpipe["stage_stash_mb"])
