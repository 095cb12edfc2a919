"""A cell carries its engine's own settings generically (``engine_params``) and keeps
the ``cell_id`` it had when those settings were fields of the cell, so that sweeps run
before still resume; records and sweep.json read back into the same cell."""

from __future__ import annotations

from dataclasses import asdict

from profiler.cell import CellConfig
from profiler.engines import cell_label

PIPE = {"microbatches": 4, "schedule": "gpipe", "replicas": 1, "split": "balanced",
        "task": "train"}


def _pipe() -> CellConfig:
    return CellConfig(engine="torch-pipe", model="lenet-cnn", layers=None, devices=2,
                      batch=32, engine_params=PIPE)


def test_a_pipeline_cell_keeps_the_id_it_had_as_fields():
    # The ids d194bb0 gave these cells, when microbatches, schedule, ... were fields.
    assert _pipe().cell_id == "acc00a481b87"
    assert CellConfig(engine="mxnet").cell_id == CellConfig().cell_id


def test_a_record_and_sweep_json_read_back_into_the_same_cell():
    cell = _pipe()
    record = cell.fields_record()
    assert record["microbatches"] == 4 and "engine_params" not in record  # a column each
    assert CellConfig.from_fields(record) == cell
    assert CellConfig.from_fields(asdict(cell)) == cell  # sweep.json's form
    assert cell.tags()["schedule"] == "gpipe"


def test_labels_name_the_settings_as_the_engine_says_them():
    assert cell_label(_pipe()) == "lenet-cnn b32 d2 sync torch-pipe S2 M4 gpipe"
    assert _pipe().label.endswith("torch-pipe microbatches=4 schedule=gpipe replicas=1 "
                                  "split=balanced task=train")
    assert cell_label(CellConfig(engine="mxnet")) == CellConfig(engine="mxnet").label
