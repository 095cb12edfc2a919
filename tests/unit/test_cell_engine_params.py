"""A cell carries its engine's own settings generically (``engine_params``) and keeps
the ``cell_id`` it had when those settings were fields of the cell, so that sweeps run
before still resume; records and sweep.json read back into the same cell."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from profiler.cell import CellConfig
from profiler.engines import cell_label, get_engine
from profiler.errors import ConfigError

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


def _variants(**values) -> list[CellConfig]:
    engine = get_engine("torch-pipe")
    base = CellConfig(engine="torch-pipe", model="lenet-cnn", layers=None, devices=2, batch=32)
    parsed = {name: next(o for o in engine.options if o.name == name).parse(text)
              for name, text in values.items()}
    return engine.variants(base, parsed)


def test_a_setting_added_later_stays_out_of_the_id_at_its_default():
    """--weights came after pipeline cells had ids: at init it is no engine_param, so a
    cell of the grid keeps the id it had; typed as init it is the same cell."""
    (cell,) = _variants(microbatches="4")
    assert cell.cell_id == "acc00a481b87" and cell.param("weights") is None
    (typed,) = _variants(microbatches="4", weights="init")
    assert typed == cell
    init, trained = _variants(microbatches="4", task="infer", weights="init,train")
    assert "weights" not in dict(init.engine_params)
    assert trained.param("weights") == "train" and trained.cell_id != init.cell_id
    assert cell_label(trained).endswith("torch-pipe S2 M4 gpipe infer weights=train")


def test_weights_train_goes_with_inference_and_is_left_out_beside_it():
    cells = _variants(task="train,infer", weights="train")
    assert [(c.param("task"), c.param("weights")) for c in cells] == [("infer", "train")]
    (cell,) = _variants(weights="train")
    with pytest.raises(ConfigError, match="--weights train trains the cell before"):
        get_engine("torch-pipe").check_cell(cell)


def test_a_checkpoint_is_named_by_its_content_and_staged(tmp_path):
    """A checkpoint's value is its file's name and digest: another content is another
    cell; the engine hands the sweep the file to stage."""
    path = tmp_path / "net.pt"
    path.write_bytes(b"one")
    (first,) = _variants(task="infer", weights=str(path))
    path.write_bytes(b"two")
    (second,) = _variants(task="infer", weights=str(path))
    assert first.param("weights").startswith("net.pt@") and first.cell_id != second.cell_id
    (staged,) = get_engine("torch-pipe").user_files(second)
    assert staged.kind == "weights" and staged.source == path.resolve()
    assert staged.staged_name == f"weights-{second.param('weights').split('@')[1]}.pt"
    assert get_engine("torch-pipe").user_files(first)[0].digest != staged.digest
    with pytest.raises(ConfigError, match="neither init nor train nor a file"):
        _variants(weights=str(tmp_path / "missing.pt"))
