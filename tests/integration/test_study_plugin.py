"""A study added by one class and one registration line is planned, run, judged and shown.

The study below is defined here, as a new study package would define it, and registered
with one line (``STUDIES[name] = study``, what ``profiler/study/__init__.py`` does for
park2019). Nothing else learns its name: ``edgeprof study`` lists it and builds its
command with its own option (``--batch``) beside the ones every study takes; the plan,
the estimate, the run and sweep.json come from the generic study code; ``edgeprof
report`` finds its section through the study recorded in sweep.json. Two real LeNet-MLP
cells on the local cluster (1 and 2 devices, 300 synthetic samples), each run twice
(``--repeats 2``): the ratio is shown as its median and range over the repeats.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from profiler.cell import CellConfig
from profiler.cli import cli
from profiler.report.ratios import Cells, Ratio, div, per_repeat, per_sample_s
from profiler.report.html import number
from profiler.report.study_section import StudySection
from profiler.study import STUDIES
from profiler.study.base import Grid, Study, StudyOption
from profiler.sweep.grid import validate

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
SAMPLES = 300


class ToyStudy(Study):
    """Two cells and one ratio: a study plugin's smallest form."""

    name = "toy"
    description = "A toy study: LeNet-MLP on 1 and 2 devices (a test plugin)."
    options = (StudyOption("batch", 64, "Batch size of both cells.", type=int),)
    min_steps = 3  # the two-device cell trains 4 steps a worker (150 samples, batch 32)

    def grid(self, scale, options, engine, available):
        cells = [validate(CellConfig(engine=engine, model="lenet-mlp", layers=None,
                                     batch=options.get("batch", 64), devices=devices,
                                     max_samples=round(SAMPLES * scale), dataset="synthetic"))
                 for devices in (1, 2)]
        return Grid(cells=cells, val_samples=100,
                    samples={("lenet-mlp", d): round(SAMPLES * scale) for d in (1, 2)},
                    datasets={"lenet-mlp": "synthetic"}, recorded={"batch": cells[0].batch})

    def section(self, records):
        # The ratio on each repeat's cells, merged: its median, range and verdict.
        ratios = per_repeat(records, self._ratios, self.min_steps)
        return StudySection(title="Reproducing the toy study", intro="The toy's one ratio",
                            bands="Band: x/÷1000.", ratios=ratios, figures=[_figure(ratios[0])],
                            min_steps=self.min_steps)

    def _ratios(self, records):
        cells = Cells(records)
        batch = records[0]["batch"] if records else 64
        one, two = cells.get("lenet-mlp", batch, 1), cells.get("lenet-mlp", batch, 2)
        # A band no host misses: the test shows the ratio judged, not a finding.
        return [Ratio("Toy table", "time 2 / 1 devices", f"lenet-mlp b{batch}", 1.0,
                      div(per_sample_s(two), per_sample_s(one)), band=1000.0,
                      cells=(two, one))]


def _figure(ratio: Ratio):
    """The ratio as a bar beside the study's: a study's own figure in its section."""
    import matplotlib.pyplot as plt

    from profiler.report.figures import Figure, png_bytes
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.bar(["study", "ours"], [ratio.study, ratio.ours or 0])
    return Figure("fig-toy-ratio", "The toy's ratio", "ours beside the study's", png_bytes(fig))


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(STUDIES, ToyStudy.name, ToyStudy())  # the one line


def test_a_registered_study_is_planned_run_judged_and_reported(toy, tmp_path):
    runner = CliRunner()
    listed = runner.invoke(cli, ["study", "--help"])
    assert listed.exit_code == 0 and "toy" in listed.output and "park2019" in listed.output
    assert "--batch" in runner.invoke(cli, ["study", "toy", "--help"]).output

    out = tmp_path / "toy"
    args = ["study", "toy", "--cluster", "local", "--batch", "32", "--repeats", "2",
            "--out", str(out)]
    planned = runner.invoke(cli, [*args, "--estimate"])
    assert planned.exit_code == 0, planned.output
    assert "study toy: 4 cells on the local cluster" in planned.stderr
    assert "estimated time" in planned.stderr and not out.exists()  # planned, not run

    done = runner.invoke(cli, args)
    assert done.exit_code == 0, (done.output, done.stderr)
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted((r["devices"], r["batch"], r["status"], r["repeat"]) for r in records) == \
        [(1, 32, "ok", 0), (1, 32, "ok", 1), (2, 32, "ok", 0), (2, 32, "ok", 1)]
    assert [r["repeat"] for r in records] == [0, 0, 1, 1]  # interleaved
    assert json.loads((out / "sweep.json").read_text())["extra"] == \
        {"study": "toy", "scale": 1.0, "batch": 32, "repeats": 2}
    assert ("the study's ratios: 1 within their band, 0 outside, 0 too few steps, "
            "0 not comparable (other data); 0 without a finished cell") in done.stdout

    # The report asks the registry for the study sweep.json names.
    (out / "report.html").unlink()
    again = runner.invoke(cli, ["report", str(out)])
    assert again.exit_code == 0, (again.output, again.stderr)
    page = (out / "report.html").read_text()
    assert "<h2 id='reproduction'>Reproducing the toy study</h2>" in page
    row = page.split("<td class='l'>Toy table</td>", 1)[1].split("</tr>", 1)[0]
    assert "time 2 / 1 devices" in row and "<td class='l in'>within</td>" in row
    assert "<th>ours (median)</th><th>range</th>" in page and "Every cell ran 2 times" in page
    section = STUDIES["toy"].section(records)
    low, high = section.ratios[0].spread
    assert low < high and f"<td class='nw'>{number(low)}–{number(high)}</td>" in row
    assert "Beside the study" not in page  # the toy publishes no per-cell numbers
    assert "<figure id=\"fig-toy-ratio\">" in page
    # Any study's ratios are drawn against their bands, the repeats' range with them.
    assert "<figure id=\"fig-study-ratios\">" in page and "its 2 repeats" in page
    assert (out / "report-figures" / "fig-study-ratios.png").read_bytes().startswith(b"\x89PNG")
    assert (out / "report-figures" / "fig-toy-ratio.png").read_bytes().startswith(b"\x89PNG")
