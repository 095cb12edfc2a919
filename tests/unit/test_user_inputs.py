"""The user's files a sweep stages, and the cell fields that name them."""

from __future__ import annotations

import hashlib
import os

import pytest

from profiler.cell import CellConfig
from profiler.errors import ConfigError
from profiler.inputs import stage, staged_path, user_file


def test_a_user_file_is_named_by_its_content_and_staged_once(tmp_path):
    source = tmp_path / "net.py"
    source.write_text("x = 1\n")
    item = user_file("model", source, "--model")
    assert item.digest == hashlib.sha256(b"x = 1\n").hexdigest()
    assert item.staged_name == f"model-{item.digest[:12]}.py" and item.label == "net.py"
    inputs = stage([item], tmp_path / "sweep")
    staged = inputs / item.staged_name
    assert staged.read_text() == "x = 1\n"
    assert staged_path(inputs, "model", item.digest, ".py") == staged
    before = staged.stat().st_mtime_ns
    os.utime(source, ns=(0, 0))
    stage([item], tmp_path / "sweep")  # a resumed sweep: already there, not copied again
    assert staged.stat().st_mtime_ns == before
    assert [p.name for p in inputs.iterdir()] == [item.staged_name]  # no partial left


@pytest.mark.parametrize("make, said", [
    (lambda d: d / "missing.py", "no such file"),
    (lambda d: d, "is not a file"),
])
def test_a_user_file_that_is_not_one_is_refused_in_one_line(tmp_path, make, said):
    with pytest.raises(ConfigError, match=said) as info:
        user_file("script", make(tmp_path), "--script")
    assert "\n" not in str(info.value) and "--script" in str(info.value)


def test_a_file_changed_between_check_and_stage_is_refused(tmp_path):
    source = tmp_path / "train.py"
    source.write_text("a\n")
    item = user_file("script", source, "--script")
    source.write_text("b\n")
    with pytest.raises(ConfigError, match="changed"):
        stage([item], tmp_path / "sweep")
    assert not (tmp_path / "sweep" / "inputs" / item.staged_name).exists()


def test_new_cell_fields_keep_old_cell_ids_at_their_defaults():
    """Cells written before the user's-own-training fields keep their ids (resume)."""
    # The ids a cell of format 4 had (computed before the fields existed).
    assert CellConfig().cell_id == "0c0e850b5a17"
    assert CellConfig(model="lenet-mlp", layers=None).cell_id == "25be52e78eb5"
    tagged = CellConfig(model_digest="ab" * 32)
    assert tagged.cell_id != CellConfig().cell_id
    # Pairs read back from JSON (lists) are the same cell.
    assert CellConfig(params=[["opt", "adam"]]).cell_id == \
        CellConfig(params=(("opt", "adam"),)).cell_id
