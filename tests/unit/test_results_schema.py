"""The results record has one owner, ``profiler.results_schema``: docs/columns.md is made
from it, results.csv's order comes from it, each filler's keys are its group's, and
every name a table shows or a rule picks is one of its columns.

The record of a real cell is checked against it in
tests/integration/test_results_schema_record.py.
"""

from __future__ import annotations

import importlib.util
from dataclasses import fields

import pytest

from profiler import results_schema
from profiler.cell import CellConfig
from profiler.column import KINDS, Column
from profiler.metrics.summary import SUMMARY_COLUMNS
from profiler.engines.pipeline import report as pipeline
from profiler.report import compare, engines, html, record_check
from profiler.report import energy as report_energy
from profiler.results_schema import COLUMNS, columns_of, csv_columns
from profiler.sweep import board_time, table, train_points
from profiler.sweep.events import CellEvents
from profiler.sweep.store import ResultsStore
from profiler.sweep.stragglers import Straggler
from profiler.timeline import rate, steps
from profiler import engines as engine_registry
from profiler.engines.pipeline import TorchPipelineEngine
from profiler.engines.pipeline import columns as pipeline_columns
from tests.conftest import ROOT
from workloads.events import EventWriter

DOC = ROOT / "docs" / "columns.md"
# Names the report's tables compute from a record's columns (not columns themselves).
DERIVED = {"config", "epoch_s_mean", "pipe_bytes_floor_mb", "stage_stash_mb_max",
           "repeat_shown"}


def test_docs_columns_md_is_the_schemas():
    from profiler.sweep import columns_doc

    assert DOC.read_text() == columns_doc.markdown(), (
        f"{DOC} is stale: regenerate it with "
        "`python -m profiler.sweep.columns_doc > docs/columns.md`")


def test_every_column_is_described_once_with_a_filler_that_exists():
    names = [c.name for c in COLUMNS]
    assert len(names) == len(set(names))
    for c in COLUMNS:
        assert c.kind in KINDS and c.description and c.description != "(undescribed)", c
        assert importlib.util.find_spec(c.filled_by) is not None, c


def test_the_configuration_columns_are_the_cells_fields_in_order():
    assert columns_of("config") == tuple(f.name for f in fields(CellConfig)
                                         if f.name != "engine_params")
    kinds = {c.name: c.kind for c in COLUMNS}
    assert (kinds["layers"], kinds["lr"], kinds["params"], kinds["sync"]) == (
        "int", "float", "list", "str")


def test_csv_order_id_config_results_then_the_agents_groups_then_an_engines():
    plain = csv_columns(monitored=False)
    monitored = csv_columns(monitored=True)
    assert plain[:4] == ["sweep_id", "cell_id", "cluster", "attempt"]
    assert plain[4:4 + len(columns_of("config"))] == list(columns_of("config"))
    assert not set(plain) & set(SUMMARY_COLUMNS)
    assert monitored == plain + SUMMARY_COLUMNS
    # Record-only detail stays out of the table.
    assert "worker_nodes" not in monitored and "launched_at" not in monitored
    # Where the training set's size and the samples trained sit, side by side.
    assert plain[plain.index("train_samples") + 1] == "samples_trained"
    own = Column("pipe_extra_ms", "float", "ms", "an engine's own", "profiler.engines", "x")
    taken = Column("status", "int", "", "a name already the record's", "profiler.engines", "x")
    assert csv_columns(monitored=False, extra=[own, taken]) == plain + ["pipe_extra_ms"]
    assert results_schema.get("pipe_extra_ms", [own]) is own
    assert results_schema.get("param_hidden").kind == "str"
    assert results_schema.get("no_such_column") is None


def test_the_store_writes_the_schemas_header_then_an_engines_then_params(tmp_path):
    own = Column("pipe_extra_ms", "float", "ms", "an engine's own", "profiler.engines", "x")
    store = ResultsStore(tmp_path, monitored=True, extra=[own])
    store.append({"cell_id": "a", "sweep_id": "s", "status": "ok", "pipe_extra_ms": 2.5,
                  "params": [["hidden", "64"]]})
    header = (tmp_path / "results.csv").read_text().splitlines()[0].split(",")
    assert header == csv_columns(monitored=True) + ["pipe_extra_ms", "param_hidden"]


def test_columns_of_follows_the_groups_given_and_refuses_an_unknown_one():
    assert columns_of("energy", "cost", kind="float") == (
        "energy_j", "avg_power_w", "j_per_sample", "energy_to_accuracy_j", "cost_usd",
        "cost_per_epoch_usd")
    with pytest.raises(KeyError, match="no column group"):
        columns_of("energies")


def test_each_filler_fills_its_groups_columns():
    """The fillers' keys, with nothing measured: their groups, no more, no less."""
    events = CellEvents().columns(0.0)
    assert set(events) - {"divergence"} == set(columns_of("events"))  # record pops it
    assert set(rate.robust_columns({}, {}, {}, True)) == set(columns_of("rate"))
    assert set(steps.summarize(steps.CellSteps(), {}, None, True)) == set(columns_of("breakdown"))
    assert set(Straggler(CellConfig(), None).columns([])) == set(columns_of("stragglers"))
    own = {c.name for c in TorchPipelineEngine.columns}
    assert set(pipeline_columns.columns({0: []}, {0: {"stages": 2}})) <= own


def test_samples_trained_is_every_workers_end_summed_not_the_sets_size(tmp_path):
    """A 2-worker cell of a 24,000-sample set, each worker over its whole shard twice:
    the set's size is 24,000, the samples trained 47,872 (what j_per_sample divides by)."""
    for rank in (0, 1):
        with EventWriter(tmp_path, rank) as writer:
            writer.emit("start", num_workers=2, train_samples=24000)
            writer.emit("end", samples=23936)
    from profiler.metrics.energy import cell_work
    from profiler.sweep.events import read_cell_events

    events = read_cell_events(tmp_path)
    columns = events.columns(0.0)
    assert (columns["train_samples"], columns["samples_trained"]) == (24000, 47872)
    assert cell_work(events).samples == 47872


def test_every_name_a_table_shows_or_a_rule_picks_is_a_column():
    shown = {
        "sweep.table": [key for _, key, _ in table.COLUMNS],
        "report.html": [key for key, _ in html.STATUS_COLUMNS + html.BREAKDOWN_COLUMNS],
        "report.energy": [key for key, _ in report_energy.SECTION_COLUMNS
                          + report_energy.STATUS_COLUMNS],
        "report.compare": compare.MEASURES + compare.ENERGY_MEASURES
        + [name for name, _ in engine_registry.compare_measures()],
        "report.engines": [key for key, _ in engines.MEASURES] + list(engines.SAME_CELL),
        "report.pipeline": [key for _, key in pipeline.TABLE] + list(pipeline.TIME_MS),
        "sweep.board_time": list(board_time.TIME_COLUMNS),
        "sweep.train_points": list(train_points.CELL_FIELDS),
        "report.record_check": sorted(record_check._COUNTS),
    }
    own = engine_registry.columns()  # the engines' settings and columns
    for where, names in shown.items():
        unknown = [n for n in names
                   if n not in DERIVED and results_schema.get(n, own) is None]
        assert not unknown, f"{where} shows columns the schema does not have: {unknown}"


def test_the_sweep_tables_units_are_its_columns():
    """A measure's heading ends in its column's unit (``mem_MB``, ``cpu_%``,
    ``samples/s``), as the schema has it; the configuration's are its names."""
    for heading, key, _ in table.COLUMNS:
        column = results_schema.get(key)
        if column.unit and column.group != "config":
            assert heading.endswith(column.unit), (heading, key, column.unit)


def test_the_reports_headings_carry_their_columns_help():
    column = results_schema.get("rss_mb_peak")
    assert column.help == f"{column.description} (MB)"
    assert results_schema.help_of("config") == ""
    page = html.render(title="t", environment={}, records=[{"cell_id": "a", "status": "ok",
                                                            "rss_mb_peak": 12.5}],
                       config_of=lambda r: "cell", figures=[], cell_figures=[])
    escaped = column.help.replace("'", "&#39;")
    assert f"<th class='' title='{escaped}'>mem peak MB</th>" in page


@pytest.mark.parametrize("name, value, field", [
    ("energy_j", 12, 12.0), ("cost_usd", 0.5, 0.5), ("samples_trained", 640.0, 640),
    ("diverged", True, True), ("energy_j", True, None), ("energy_j", "12", None),
    ("reason", "x", None), ("epoch_s", [1.0], None), ("energy_j", None, None)])
def test_a_columns_influx_field_has_its_type(name, value, field):
    got = results_schema.get(name).field_value(value)
    assert got == field and type(got) is type(field)


def test_the_cell_points_energy_is_a_float_even_when_whole(tmp_path):
    record = {"status": "ok", "energy_j": 12, "elapsed_s": 3, "reaped_at": 1.0}
    assert train_points.spool_cell_points(tmp_path, CellConfig(), record, "s") == 1
    text = "".join(p.read_text() for p in (tmp_path / train_points.SPOOL_NAME).rglob("*")
                   if p.is_file())
    assert "energy_j=12 " in text or "energy_j=12," in text  # a float: no "i"
    assert "elapsed_s=3" in text and "elapsed_s=3i" not in text
    assert "devices_n=1i" in text
