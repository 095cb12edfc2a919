"""Optimizer settings: per-model defaults, lr scaling per engine, what identifies a cell."""

from __future__ import annotations

import pytest

from profiler.cell import CellConfig
from workloads import optim


@pytest.mark.parametrize("kvstore,scaling,expected", [
    ("local", "none", 0.02), ("local", "linear", 0.02),
    ("dist_sync", "none", 0.02), ("dist_sync", "linear", 0.08),
    ("horovod", "none", 0.02), ("horovod", "linear", 0.08),
    ("dist_async", "none", 0.02), ("dist_async", "linear", 0.02),  # each push alone
])
def test_applied_lr(kvstore, scaling, expected):
    assert optim.applied_lr(0.02, scaling, kvstore, 4) == pytest.approx(expected)


def test_unknown_scaling_is_refused():
    with pytest.raises(ValueError, match="none or linear"):
        optim.applied_lr(0.02, "sqrt", "dist_sync", 4)


@pytest.mark.parametrize("kvstore,expected", [("local", 32), ("dist_sync", 128),
                                              ("dist_async", 32), ("horovod", 32)])
def test_step_normalises_dist_sync_by_the_global_batch_only(kvstore, expected):
    assert optim.step_samples(32, kvstore, 4) == expected


def test_cells_get_their_models_default_lr_unless_given():
    assert CellConfig(model="lenet-mlp", layers=None).lr == optim.DEFAULT_LR["lenet-mlp"]
    assert CellConfig(model="resnet").lr == optim.DEFAULT_LR["resnet"]
    assert CellConfig(model="lenet-cnn", layers=None, lr=0.3).lr == 0.3


@pytest.mark.parametrize("change", [dict(momentum=0.5), dict(wd=0.0),
                                    dict(lr_scaling="linear"), dict(lr=0.05)])
def test_optimizer_settings_are_part_of_a_cells_identity(change):
    base = CellConfig(model="lenet-mlp", layers=None)
    assert CellConfig(model="lenet-mlp", layers=None, **change).cell_id != base.cell_id
