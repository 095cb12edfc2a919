"""An engine with a setting, a column and a report section of its own, in one class and
one registration line, is swept, resumed, tabled, compared and reported.

``ToyEngine`` below is all a new engine writes (as ``profiler/engines/pipeline/`` does
for torch-pipe): its setting ``--knob`` (an ``EngineOption``: a grid dimension of its
cells, carried by each cell's ``engine_params``), its column ``toy_start_batch``
(filled by ``summarize`` from the worker's real start event), its label in tables and
progress, a measure ``edgeprof compare`` sets side by side, and a section of the report.
Nothing outside the class names any of them: the grid, the results store, the table,
``compare`` and the report ask the registry. Each cell trains a real ``workloads.train``
torch process on one device.
"""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import pytest

from profiler.cell import CellConfig
from profiler.cluster.base import Node
from profiler.engines import ENGINES
from profiler.column import Column
from profiler.engines.base import (Engine, EngineOption, Package, ProcessSpec, ReportSection,
                                   TrainOptions)
from profiler.option_lists import parse_int_list
from tests.conftest import need

pytestmark = pytest.mark.integration


class ToyEngine(Engine):
    """One torch worker per cell; a knob of its own that the engine reports back."""

    name = "toy"
    description = "PyTorch on one device, with a knob (a test plugin)"
    framework = "torch"
    sync_modes = ("sync",)
    models = ("lenet-mlp",)
    packages = (Package("torch", "torch"),)
    options = (EngineOption("knob", "1", lambda text: parse_int_list(text, "--knob"),
                            "The toy engine's knob (toy).", "int"),)
    columns = (Column("toy_start_batch", "int", "samples", "the batch the worker started with",
                      __name__, "toy"),)
    compare_measures = (("toy_start_batch", "start batch"),)

    def comm(self, cell: CellConfig) -> str:
        return "local"

    def label(self, rec: dict, *, stages: bool = True) -> str:
        return f"toy K{rec.get('knob')}"

    def plan(self, cell: CellConfig, nodes: list[Node], cell_dir: Path,
             options: TrainOptions) -> list[ProcessSpec]:
        return [ProcessSpec("worker", 0, nodes[0], self.train_argv(cell, cell_dir, options),
                            env={"OMP_NUM_THREADS": "1"})]

    def summarize(self, workers: dict, starts: dict) -> dict:
        return {"toy_start_batch": (starts.get(0) or {}).get("batch")}

    def report_sections(self, records: list[dict]) -> list[ReportSection]:
        mine = [r for r in records if r.get("engine") == self.name and r.get("status") == "ok"]
        if not mine:
            return []
        return [ReportSection("toy", "Toy knobs", "Each toy cell's <i>knob</i>.",
                              ["knob", "start batch"],
                              [(r, [r.get("knob"), r.get("toy_start_batch")])
                               for r in mine])]


@pytest.fixture
def toy(monkeypatch):
    need("torch (scripts/setup.sh installs its CPU build)",
         importlib.util.find_spec("torch") is not None)
    monkeypatch.setitem(ENGINES, ToyEngine.name, ToyEngine())  # the one line


def _grid(knobs: list[int]) -> list[CellConfig]:
    from profiler.sweep.grid import expand

    return expand(engines=["toy"], models=["lenet-mlp"], layers=[None], batches=[32],
                  devices=[1], syncs=["sync"], max_samples=320,
                  engine_values={"knob": knobs})


def _sweep(cells, out: Path, resume: bool = False):
    from profiler.sweep.sweep import SweepSettings, run_sweep

    return run_sweep(SweepSettings(cells=cells, out_dir=out, interval_s=None,
                                   val_samples=200, resume=resume), progress=False)


def test_its_setting_column_and_section_go_everywhere(toy, tmp_path):
    from profiler.report import compare as cmp
    from profiler.report.build import build_report
    from profiler.report.sweep_data import load_sweep
    from profiler.sweep.table import format_table

    cells = _grid([1, 3])
    assert [c.param("knob") for c in cells] == [1, 3]  # a grid dimension of its own
    assert len({c.cell_id for c in cells}) == 2
    out = tmp_path / "s"
    first = _sweep(cells[:1], out)
    assert first.records[0]["status"] == "ok", first.records[0].get("reason")

    # Resumed with the whole grid: the finished cell is kept, the other one runs.
    outcome = _sweep(cells, out, resume=True)
    records = {r["knob"]: r for r in outcome.records}
    assert [records[k]["attempt"] for k in (1, 3)] == [1, 1]
    assert all(r["status"] == "ok" for r in records.values()), records
    assert (records[1]["toy_start_batch"], records[3]["toy_start_batch"]) == (32, 32)
    assert len((out / "results.jsonl").read_text().splitlines()) == 2  # nothing rerun

    with open(out / "results.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [row["knob"] for row in rows] == ["1", "3"]
    assert [row["toy_start_batch"] for row in rows] == ["32", "32"]

    table = format_table(outcome.records)
    assert "toy K1" in table and "toy K3" in table  # its label, as it says it

    sweep = load_sweep(out)
    pairs = cmp.compare(sweep, sweep)
    assert "start batch" in cmp.table(pairs).splitlines()[0]
    assert [row.ratio("toy_start_batch") for row in pairs] == [1.0, 1.0]

    page = build_report(out).read_text()
    assert "<h2 id='toy'>Toy knobs</h2>" in page
    assert "Each toy cell's <i>knob</i>." in page  # the engine's note, its own HTML
