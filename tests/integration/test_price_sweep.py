"""``--price`` on a tiny real sweep (local cluster, torch, LeNet-MLP on 1 and 2 devices):
the cost columns in results.jsonl and results.csv, the report's energy and cost section
beside a cloud VM, and ``compare``'s cost ratios.

The local cluster's slots have no power model and this machine no power meter (no RAPL):
their energy is None, so the cost is the price per hour alone, and the report draws no
time-energy figure (tests/unit/test_report_energy.py draws it from records with energy).
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from profiler.report.html import number
from tests.conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
USD_PER_H = 0.5


def _edgeprof(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "profiler.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=240)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("price") / "sweep"
    done = _edgeprof("sweep", "--engine", "torch", "--model", "lenet-mlp", "--batch", "32",
                     "--devices", "1,2", "--max-samples", "256", "--val-samples", "200",
                     "--epochs", "2", "--interval", "0.5", "--no-breakdown", "--out", str(out),
                     "--price", f"host={USD_PER_H}")
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def _records(sweep: Path) -> list[dict]:
    return [json.loads(line) for line in (sweep / "results.jsonl").read_text().splitlines()]


def test_every_cell_costs_its_nodes_hours_at_the_price(sweep):
    records = _records(sweep)
    assert [r["status"] for r in records] == ["ok", "ok"]
    for r in records:
        nodes = int(re.search(r"x (\d+) node", r["price_source"]).group(1))
        # One device trains alone; two sync torch workers have their server beside.
        assert nodes == (1 if r["devices"] == 1 else 3)
        assert r["cost_usd"] == pytest.approx(nodes * USD_PER_H * r["elapsed_s"] / 3600,
                                              rel=1e-5)
        # An epoch's time at the price, the start-up out.
        epoch_s = sum(r["epoch_s"]) / len(r["epoch_s"])
        assert r["cost_per_epoch_usd"] == pytest.approx(nodes * USD_PER_H * epoch_s / 3600,
                                                        rel=1e-5)
        assert r["cost_per_epoch_usd"] < r["cost_usd"] / 2
        assert r.get("energy_j") is None  # no meter, no model: cost from the price alone
        assert "electricity" not in r["price_source"]
    with open(sweep / "results.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert {"cost_usd", "cost_per_epoch_usd", "price_source"} <= set(rows[0])
    assert all(float(row["cost_usd"]) > 0 for row in rows)


def test_the_report_sets_the_cells_beside_a_cloud_vm(sweep, tmp_path):
    page = tmp_path / "report.html"
    done = _edgeprof("report", str(sweep), "--out", str(page), "--cloud-vm", "c6g.large",
                     "--cloud-epoch-s", "lenet-mlp=2")
    assert done.returncode == 0, done.stderr[-2000:]
    html = page.read_text()
    assert "id='energy'" in html and "c6g.large (0.068 USD/h)" in html
    assert "fig-time-energy" not in html  # no cell has energy here
    cloud_usd = 0.068 * 2 / 3600
    cell_usd = _records(sweep)[0]["cost_per_epoch_usd"]
    # The first cell's cost over the VM's, as the page prints numbers.
    assert f"<td>{number(cell_usd / cloud_usd)}</td>" in html


def test_bad_cloud_options_are_one_line(sweep, tmp_path):
    done = _edgeprof("report", str(sweep), "--out", str(tmp_path / "r.html"),
                     "--cloud-vm", "c6g.large")
    assert done.returncode == 2 and "go together" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "r.html").exists()


def test_compare_shows_the_cost(sweep):
    done = _edgeprof("compare", str(sweep), str(sweep))
    assert done.returncode == 0, done.stderr[-2000:]
    head, *rows = done.stdout.splitlines()[1:]
    assert "cost USD" in head and "USD/epoch" in head
    assert all(row.split()[-2:] == ["1.000", "1.000"] for row in rows)
