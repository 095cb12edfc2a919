"""A sweep holds back the cells its ``may_start`` refuses (a study's ``--budget`` kept at
run time: study/budget.py ``Keeper``), records none of them, and ``--resume`` runs them.
Real MXNet training on the local cluster, two tiny cells."""

from __future__ import annotations

import json

from profiler.cell import CellConfig
from profiler.sweep.sweep import SweepSettings, run_sweep


def _cells() -> list[CellConfig]:
    return [CellConfig(model="lenet-mlp", layers=None, batch=b, devices=1, max_samples=320,
                       dataset="synthetic") for b in (32, 64)]


def test_a_held_back_cell_is_not_run_nor_recorded_and_resume_runs_it(tmp_path):
    out = tmp_path / "sweep"
    asked = []

    def may_start(cell):
        asked.append(cell.batch)
        return "the budget is spent (0 s left)" if cell.batch == 64 else None

    outcome = run_sweep(SweepSettings(cells=_cells(), out_dir=out, interval_s=None,
                                      val_samples=64, may_start=may_start), progress=False)
    assert asked == [32, 64]
    assert (outcome.held_back, outcome.held_reason) == (1, "the budget is spent (0 s left)")
    assert [r["batch"] for r in outcome.records] == [32]
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert [(r["batch"], r["status"]) for r in lines] == [(32, "ok")]

    again = run_sweep(SweepSettings(cells=_cells(), out_dir=out, interval_s=None,
                                    val_samples=64, resume=True), progress=False)
    assert again.held_back == 0 and again.skipped == 1
    assert sorted(r["batch"] for r in again.records) == [32, 64]
