"""A study's ratios with repeats and steps: median, range, "too few steps", the counts.

Hand-made records (no run): a study's cells repeated (``--repeats``) give one row per
ratio, judged on the median of the repeats' values; a row whose cells trained fewer steps
per worker than the study's minimum is "too few steps", neither within nor outside; the
summary counts every verdict; repeats keep the first run's cell_id and are interleaved.
"""

from __future__ import annotations

import json

import pytest

from profiler.cell import CellConfig
from profiler.errors import ConfigError
from profiler.report.html import _ratio_rows, _study
from profiler.report.ratios import Ratio, per_repeat, steps_per_worker, summary
from profiler.report.study_section import StudySection
from profiler.study import STUDIES
from profiler.study.park2019.ratios import reproduce
from profiler.study.plan import StudySettings, plan, repeated
from profiler.sweep.table import format_table

TIME_4_1 = ("Table 1", "time", "lenet-mlp b64 sync, 4 / 1 devices")  # the study: 2.72


def _lenet(devices: int, epoch_s: float, repeat: int = 0, steps: float | None = 5.0) -> dict:
    """A LeNet-MLP cell of 1,280 samples (five steps a worker on four devices)."""
    return {"model": "lenet-mlp", "layers": None, "batch": 64, "devices": devices,
            "sync": "sync", "engine": "mxnet", "epochs": 1, "status": "ok",
            "epoch_s": [epoch_s], "train_samples": 1280, "val_accuracy_per_epoch": [0.9],
            "dataset": "mnist", "repeat": repeat, "syncs_per_worker": steps,
            "cell_id": f"mlp-{devices}-{repeat}"}


def _rows(records: list[dict], min_steps: int = 3) -> dict:
    return {(r.source, r.measure, r.config): r for r in reproduce(records, min_steps=min_steps)}


def test_each_ratio_is_the_median_of_its_repeats_with_their_range():
    # Repeat by repeat 4/1 devices: 2.0, 3.6 and 2.8: the median 2.8 is within 2.72's
    # band though two of the three repeats alone are outside it.
    records = [_lenet(1, 10.0, k) for k in range(3)]
    records += [_lenet(4, s, k) for k, s in enumerate((20.0, 36.0, 28.0))]
    row = _rows(records)[TIME_4_1]
    assert row.values == pytest.approx((2.0, 3.6, 2.8))
    assert row.ours == pytest.approx(2.8) and row.spread == pytest.approx((2.0, 3.6))
    assert row.verdict == "within" and row.within is True
    # One repeat: as before, its value and range the same.
    single = _rows(records[:1] + records[3:4])[TIME_4_1]
    assert single.ours == pytest.approx(2.0) and single.spread == pytest.approx((2.0, 2.0))
    assert single.verdict == "outside"


def test_cells_below_the_minimum_steps_are_too_few_steps_never_within():
    records = [_lenet(1, 10.0), _lenet(4, 27.0, steps=2.0)]  # 2.7: within, were it judged
    row = _rows(records)[TIME_4_1]
    assert row.ours == pytest.approx(2.7) and row.too_few_steps
    assert row.verdict == "too few steps" and row.within is None
    assert _rows(records, min_steps=2)[TIME_4_1].verdict == "within"
    # One repeat of too few steps makes the merged row too few as well.
    more = records + [_lenet(1, 10.0, 1), _lenet(4, 27.0, 1)]
    assert _rows(more)[TIME_4_1].verdict == "too few steps"


def _cnn(devices: int, train_s: float, cpu: float, mem: float, repeat: int = 0) -> dict:
    """An example LeNet cell of Figure 4 (10 / 1 devices, batch 64) with its resources."""
    return {"model": "lenet-example", "layers": None, "batch": 64, "devices": devices,
            "sync": "sync", "engine": "mxnet", "epochs": 1, "status": "ok",
            "epoch_s": [train_s], "train_s": train_s, "train_samples": 6400,
            "dataset": "mnist", "repeat": repeat, "syncs_per_worker": 10.0,
            "cpu_percent_mean": cpu, "mem_used_mb_mean": mem,
            "cell_id": f"cnn-{devices}-{repeat}"}


def test_a_time_or_cpu_share_over_too_short_a_window_is_too_few_steps_memory_is_judged():
    # The study (park2019.yaml): CPU 10 / 1 devices 14 % / 20 %, memory 330 / 300 MB.
    cpu = ("Figure 4", "CPU", "lenet-example b64 sync, 10 / 1 devices")
    mem = ("Figure 4", "memory", "lenet-example b64 sync, 10 / 1 devices")
    time = ("Table 2", "time", "lenet-example b64 sync, 10 / 1 devices")
    short = _rows([_cnn(1, 2.0, 90.0, 300.0), _cnn(10, 20.0, 60.0, 370.0)])
    for key in (cpu, time):
        assert short[key].verdict == "too few steps" and "2.00 s" in short[key].note
    assert short[mem].verdict in ("within", "outside")  # a level: judged however short
    long = _rows([_cnn(1, 2.6, 90.0, 300.0), _cnn(10, 20.0, 60.0, 370.0)])
    for key in (cpu, time):
        assert long[key].verdict in ("within", "outside") and long[key].note == ""
    # One short repeat of three: the merged row is not judged, and says why.
    three = [_cnn(1, t, 90.0, 300.0, k) for k, t in enumerate((6.0, 2.4, 6.0))]
    three += [_cnn(10, 20.0, 60.0, 370.0, k) for k in range(3)]
    merged = _rows(three)[cpu]
    assert merged.verdict == "too few steps" and "2.40 s" in merged.note


def test_steps_per_worker_reads_the_recorded_count_else_the_samples():
    assert steps_per_worker({"syncs_per_worker": 15.0, "epoch_s": [1.0] * 5}) == 3
    shard = {"train_samples": 1280, "batch": 64, "devices": 4}
    assert steps_per_worker(shard) == 5  # 1,280 / 4 workers / 64
    assert steps_per_worker({**shard, "data_partition": "replicate"}) == 20
    assert steps_per_worker({"batch": 64}) is None and steps_per_worker(None) is None


def test_summary_counts_every_verdict():
    rows = [Ratio("t", "m", "within", 2.0, 2.1, 1.25),
            Ratio("t", "m", "outside", 2.0, 4.0, 1.25),
            Ratio("t", "m", "few", 2.0, 2.0, 1.25, too_few_steps=True),
            Ratio("t", "m", "other data", 1.0, 1.0, 1.1, comparable=False),
            Ratio("t", "m", "missing", 2.0, None, 1.25)]
    assert [r.verdict for r in rows] == ["within", "outside", "too few steps",
                                         "not comparable", "no cell"]
    assert summary(rows) == {"rows": 5, "judged": 2, "within": 1, "outside": 1,
                             "too_few_steps": 1, "not_comparable": 1, "missing": 1}


def test_a_study_without_repeats_or_steps_keeps_its_rows():
    # A study's own ratio function, merged per repeat: rows without cells are judged.
    def rows_of(records):
        return [Ratio("Toy", "m", "c", 1.0, float(len(records)), 10.0)]
    merged = per_repeat([{"repeat": 0}, {"repeat": 1}, {"repeat": 1}], rows_of, min_steps=3)
    assert len(merged) == 1 and merged[0].values == (1.0, 2.0)
    assert merged[0].ours == pytest.approx(1.5) and merged[0].verdict == "within"


def test_the_report_shows_the_median_range_and_verdict():
    records = [_lenet(1, 10.0, k) for k in range(2)] + [_lenet(4, s, k)
                                                          for k, s in enumerate((20.0, 30.0))]
    section = StudySection("Reproducing", "intro", "bands", ratios=reproduce(records, min_steps=3),
                           min_steps=3)
    shown = _study(section)
    row = next(r for r in shown["ratios"] if (r["source"], r["measure"], r["config"]) == TIME_4_1)
    assert shown["repeats"] == 2 and shown["min_steps"] == 3 and shown["min_window_s"] == 2.5
    assert row["ours"] == "2.500" and row["range"] == "2.000–3.000"
    assert (row["klass"], row["verdict"]) == ("in", "within")


def test_repeats_that_agree_show_one_value():
    # Accuracy with one seed: every repeat the same number.
    same = Ratio("Toy", "accuracy", "c", 0.9, 0.931, 1.1, values=(0.931, 0.931, 0.931))
    row = _ratio_rows([same])[0]
    assert row["range"] == "all 0.931" and row["ours"] == "0.931"


def test_repeats_are_interleaved_and_the_first_keeps_its_cell_id():
    cells = [CellConfig(model="lenet-mlp", layers=None, devices=d) for d in (1, 2)]
    runs = repeated(cells, 2)
    assert [(c.devices, c.repeat) for c in runs] == [(1, 0), (2, 0), (1, 1), (2, 1)]
    assert runs[0].cell_id == cells[0].cell_id and runs[2].cell_id != cells[0].cell_id
    assert runs[2].label.endswith(" r2") and not runs[0].label.endswith("r1")
    assert "repeat" not in runs[0].tags() and runs[2].tags()["repeat"] == "1"
    table = format_table([{"model": "lenet-mlp", "status": "ok", "repeat": k} for k in (0, 1)])
    assert table.splitlines()[0].split()[6] == "repeat"
    assert [line.split()[6] for line in table.splitlines()[2:]] == ["1", "2"]


def test_the_plan_multiplies_the_cells_records_repeats_and_resume_keeps_them(tmp_path):
    park = STUDIES["park2019"]
    options = {"parts": ("table1",), "devices": (1, 4)}
    once = plan(park, StudySettings(scale=0.02, options=options, cluster="local"))
    twice = plan(park, StudySettings(scale=0.02, options=options, cluster="local", repeats=2))
    assert len(twice.sweep.cells) == 2 * len(once.sweep.cells)
    assert "repeats" not in once.sweep.extra and twice.sweep.extra["repeats"] == 2
    assert "each cell runs 2 times" in twice.describe()
    (tmp_path / "sweep.json").write_text(json.dumps({"sweep_id": "x",
                                                     "extra": {"repeats": 2}}))
    resumed = plan(park, StudySettings(scale=0.02, options=options, cluster="local",
                                       resume=True, out_dir=tmp_path))
    assert len(resumed.sweep.cells) == len(twice.sweep.cells)
    with pytest.raises(ConfigError, match="--repeats 3 differs from the sweep's 2"):
        plan(park, StudySettings(scale=0.02, options=options, cluster="local",
                                 resume=True, out_dir=tmp_path, repeats=3))
