"""``edgeprof predict`` on a small real sweep (local cluster, LeNet-MLP on torch-ddp at 1,
2 and 3 devices, a few hundred samples): it prints the table, each bad input is one
line and exit 2, and the sweep's report draws the prediction beyond its cells."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner

from profiler.cli import cli
from tests.conftest import ROOT

pytestmark = pytest.mark.e2e
EDGEPROF = [sys.executable, "-m", "profiler.cli"]


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("predict") / "sweep"
    cmd = [*EDGEPROF, "sweep", "--cluster", "local", "--model", "lenet-mlp",
           "--engine", "torch-ddp", "--devices", "1,2,3", "--batch", "32",
           "--max-samples", "384", "--val-samples", "64", "--no-agent", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def _predict(*args):
    return CliRunner().invoke(cli, ["predict", *map(str, args)])


def test_it_prints_the_table_of_every_device_count_asked(sweep_dir):
    result = _predict(sweep_dir, "--devices", "8,16")
    assert result.exit_code == 0, result.output
    rows = [ln.split() for ln in result.output.splitlines()
            if ln.startswith("lenet-mlp b32 torch-ddp sync ")]
    assert [row[4] for row in rows] == ["8", "16"], result.output
    assert "fitted on 3 cells at 1,2,3 devices (local)" in result.output
    data = json.loads(_predict(sweep_dir, "--devices", "8,16", "--json").output)
    steps = [p["step_ms"] for p in data["predictions"]]
    assert all(s > 0 for s in steps) and steps[1] >= steps[0]  # a ring's step grows with N
    for p in data["predictions"]:  # an interval wherever a degree of freedom is left
        fit = data["fits"][0]
        assert (p["low_ms"] is None) == (fit["dof"] == 0)
        assert fit["dof"] == 0 or p["low_ms"] <= p["step_ms"] <= p["high_ms"]


def _one_line_exit_2(result, *words):
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "Traceback" not in result.output
    for word in words:
        assert word in lines[0], lines[0]


def test_bad_inputs_are_one_line_and_exit_2(sweep_dir, tmp_path):
    _one_line_exit_2(_predict(tmp_path, "--devices", "8"), "not a sweep folder")
    _one_line_exit_2(_predict(sweep_dir, "--devices", "0"), "--devices 0")
    _one_line_exit_2(_predict(sweep_dir, "--devices", "8", "--profile", "pi9"),
                     "unknown profile 'pi9'")
    _one_line_exit_2(_predict(sweep_dir, "--devices", "8", "--link", "fast"), "--link 'fast'")
    # A local sweep's workers talked over loopback: no link or board to scale from.
    _one_line_exit_2(_predict(sweep_dir, "--devices", "8", "--link", "1gbit"), "loopback")
    _one_line_exit_2(_predict(sweep_dir, "--devices", "8", "--compare", "pi4"),
                     "a local sweep has no board to scale from")
    _one_line_exit_2(_predict(sweep_dir, "--devices", "8", "--compare", "pi4",
                              "--profile", "pi5"), "--compare", "not both")
    _one_line_exit_2(_predict(sweep_dir, "--devices", "8", "--compare", "pi9"),
                     "unknown profile 'pi9'")
    # The same sweep without its 3-device cell: two device counts are not enough.
    few = tmp_path / "few"
    shutil.copytree(sweep_dir, few)
    records = (few / "results.jsonl").read_text().splitlines()
    (few / "results.jsonl").write_text("\n".join(
        r for r in records if json.loads(r)["devices"] != 3) + "\n")
    _one_line_exit_2(_predict(few, "--devices", "8"),
                     "needs cells at >= 2 device counts above 1 for lenet-mlp b32 torch-ddp sync")


def test_the_report_draws_the_prediction_through_and_beyond_the_cells(sweep_dir, tmp_path):
    page_file = tmp_path / "report.html"
    result = CliRunner().invoke(cli, ["report", str(sweep_dir), "--out", str(page_file)])
    assert result.exit_code == 0, result.output
    page = page_file.read_text()
    assert "<h2 id='prediction'>Predicted beyond the measured cells</h2>" in page
    figure = re.search(r'<figure id="fig-predict-1"><img alt="[^"]*" '
                       r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert figure, "no prediction figure in the page"
    import matplotlib.image as mpimg
    pixels = mpimg.imread(io.BytesIO(base64.b64decode(figure.group(1))), format="png")
    assert pixels.shape[0] > 50 and pixels.shape[1] > 50 and float(pixels.std()) > 0.01
    # The table: the measured largest count beside its prediction, then past it.
    section = page.split("<h2 id='prediction'>")[1].split("<h2")[0]
    rows = re.findall(r"<tr><td class='l'>lenet-mlp b32 torch-ddp sync</td><td>(\d+)</td>",
                      section)
    assert rows == ["3", "6", "20", "50", "100"], section[-2000:]
    assert (tmp_path / "report-figures" / "fig-predict-1.png").exists()
