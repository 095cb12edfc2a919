"""Pipeline cells where a user reviews cells, from records built here: the sweep's table
(a pipeline's shape in its engine column, other rows as they were), the report's
pipeline section and figure (absent without a pipeline cell; dilated cells in the
board's time) and compare's pipeline measures. ``tests/integration/
test_report_pipeline.py`` does the same over a real torch-pipe sweep."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from profiler.engines import engine_label, report_sections
from profiler.engines.pipeline import report as pipeline
from profiler.report import compare as cmp
from profiler.report.build import environment
from profiler.report.engines import side_by_side
from profiler.report.html import render
from profiler.report.sweep_data import Sweep
from profiler.report.sweep_data import config_label as _config
from profiler.sweep.table import format_table
from tests.report_tables import number, rows

SECTION = "<h2 id='pipeline'>"


def _plain(**kw) -> dict:
    record = {"cell_id": "p0", "engine": "torch-ddp", "model": "resnet", "layers": 20,
              "batch": 32, "devices": 2, "sync": "sync", "epochs": 1, "status": "ok",
              "reason": "", "dataset": "synthetic", "elapsed_s": 10.0, "train_s": 8.0,
              "val_accuracy": 0.5, "microbatches": None, "schedule": None,
              "replicas": None, "split": None, "params": []}
    return {**record, **kw}


def _pipe(microbatches=4, schedule="gpipe", **kw) -> dict:
    return _plain(**{
        "cell_id": f"p{microbatches}{schedule}", "engine": "torch-pipe",
        "microbatches": microbatches, "schedule": schedule, "replicas": 1,
        "split": "balanced", "pipe_stages": 2, "pipe_split": "7,8",
        "stage_compute_ms": [140.0, 130.0], "stage_imbalance": 1.037,
        "stage_imbalance_predicted": 1.1, "bubble_measured": 0.32,
        "bubble_gpipe": 1 / (microbatches + 1), "pipe_step_ms": 200.0,
        "pipe_step_ms_predicted": 180.0, "pipe_step_vs_predicted": 200 / 180,
        "pipe_bytes_floor_per_step": 2_097_152, "link_mbit_s": 100.0,
        "stage_stash_mb": [50.5, 22.0], **kw})


def test_the_table_names_a_pipelines_shape_and_leaves_other_rows_alone():
    plain = _plain()
    before = format_table([plain])
    table = format_table([plain, _pipe(), _pipe(8, "1f1b", devices=4, replicas=2,
                                                split="3,5", pipe_stages=2)])
    lines = table.splitlines()
    assert [line.split() for line in before.splitlines()[2:]] == \
        [line.split() for line in lines[2:3]]  # the same values, wider columns
    assert "torch-pipe S2 M4 gpipe" in lines[3]
    assert "torch-pipe S2 M8 1f1b R2 split=3,5" in lines[4]
    assert engine_label(_pipe(), stages=False) == "torch-pipe M4 gpipe"
    assert engine_label(_pipe(task="train")) == "torch-pipe S2 M4 gpipe"
    assert engine_label(_pipe(task="infer")) == "torch-pipe S2 M4 gpipe infer"
    assert engine_label(plain) == "torch-ddp"


def _page(records: list[dict]) -> str:
    sweep = Sweep(path=Path("s"), settings={"sweep_id": "s"}, records=records)
    return render(title="t", environment=environment(sweep), records=records,
                  config_of=_config, figures=[], cell_figures=[],
                  engine_sections=report_sections(records))


def test_the_pipeline_section_lists_each_pipeline_cell_per_stage():
    records = [_plain(), _pipe(), _pipe(8, "1f1b"),
               _pipe(8, "gpipe", cell_id="bad", status="failed", stage_compute_ms=None)]
    page = _page(records)
    table = rows(page, SECTION)
    body = {row[0]: dict(zip(table[0], row)) for row in table[1:]}
    assert sorted(body) == ["resnet-20 b32 x2 sync torch-pipe S2 M4 gpipe",
                            "resnet-20 b32 x2 sync torch-pipe S2 M8 1f1b"]  # ok ones only
    row = body["resnet-20 b32 x2 sync torch-pipe S2 M4 gpipe"]
    assert row["split (layers)"] == "7 / 8"
    assert row["compute ms"] == "140.0 / 130.0"
    assert row["stash MB"] == "50.5 / 22.0"
    assert number(row["bubble GPipe"]) == pytest.approx(0.2)
    assert number(row["step / predicted"]) == pytest.approx(1.111, abs=1e-3)
    assert number(row["floor MB/step"]) == pytest.approx(2.097, abs=1e-3)
    assert 'id="fig-pipeline-bubble-step"' in page
    # The plain cell is named as before, each pipeline cell by its shape.
    cells = [r[0] for r in rows(page, "<h2>Cells</h2>")[1:]]
    assert cells[0] == "resnet-20 b32 x2 sync torch-ddp"
    assert len(set(cells)) == len(cells)


def test_no_pipeline_cell_no_section_and_no_figure():
    records = [_plain(), _pipe(status="failed", stage_compute_ms=None)]
    assert report_sections(records) == []
    page = _page(records)
    assert SECTION not in page and "fig-pipeline" not in page


def test_a_dilated_pipeline_cell_is_shown_in_the_boards_time():
    [cell] = pipeline.cells([_pipe(speedup=4.0)], "torch-pipe")
    assert cell["stage_compute_ms"] == [560.0, 520.0]
    assert cell["pipe_step_ms"] == 800.0 and cell["pipe_step_ms_predicted"] == 720.0
    assert cell["link_mbit_s"] == 25.0  # the link ran 4 x faster than the board's
    assert cell["pipe_step_vs_predicted"] == pytest.approx(200 / 180)  # a ratio stays


def test_the_figure_draws_a_line_per_stages_and_schedule():
    import matplotlib.image as mpimg

    records = [_pipe(m, s, bubble_measured=0.5 / m) for m in (2, 4, 8)
               for s in ("gpipe", "1f1b")]
    figure = pipeline.figure(pipeline.cells(records, "torch-pipe"))
    pixels = mpimg.imread(io.BytesIO(figure.png), format="png")
    assert pixels.shape[1] > 500 and float(pixels.std()) > 0.01


def test_engines_side_by_side_keeps_each_pipeline_shape():
    """GPipe and 1F1B of one configuration, beside DDP: three columns, not one pipeline
    cell overwriting the other."""
    engines, shared = side_by_side([_plain(), _pipe(4, "gpipe", task="train"),
                                    _pipe(4, "1f1b", task="train"),
                                    _pipe(4, "gpipe", task="infer")])
    assert engines == ["torch-ddp", "torch-pipe M4 1f1b", "torch-pipe M4 gpipe"]
    assert len(shared) == 1 and len(shared[0].by_engine) == 3  # inference apart


def _sweep(records) -> Sweep:
    return Sweep(path=Path("x"), settings={}, records=records)


def test_compare_adds_pipeline_measures_only_for_pipeline_pairs():
    a = [_plain(params=[["k", "1"]]), _pipe()]
    b = [_plain(params=[["k", "1"]], train_s=16.0),
         _pipe(pipe_step_ms=300.0, stage_stash_mb=[10.0, 80.0])]
    rows_ = cmp.compare(_sweep(a), _sweep(b))  # params are lists, as read from JSON
    assert [r.config for r in rows_] == ["resnet-20 b32 x2 sync torch-ddp",
                                         "resnet-20 b32 x2 sync torch-pipe S2 M4 gpipe"]
    assert "bubble" in cmp.table(rows_).splitlines()[0]
    assert rows_[1].ratio("pipe_step_ms") == 1.5
    assert rows_[1].ratio("stage_stash_mb_max") == pytest.approx(80 / 50.5)
    assert rows_[0].ratio("pipe_step_ms") is None
    plain_only = cmp.compare(_sweep(a[:1]), _sweep(b[:1]))
    assert cmp.measures(plain_only) == cmp.MEASURES
    assert "bubble" not in cmp.to_csv(plain_only)
