"""Optimizer settings: per-model defaults, lr scaling per engine, what identifies a cell,
and the grid's checks of --momentum, --wd and --lr-scaling."""

from __future__ import annotations

import pytest

from profiler.cell import CellConfig
from profiler.errors import ConfigError
from profiler.sweep import grid
from workloads import optim


@pytest.mark.parametrize("kvstore,scaling,expected", [
    ("local", "none", 0.02), ("local", "linear", 0.02),
    ("ps-sync", "none", 0.02), ("ps-sync", "linear", 0.08),
    ("allreduce", "none", 0.02), ("allreduce", "linear", 0.08),
    ("ps-async", "none", 0.02), ("ps-async", "linear", 0.02),  # each push alone
])
def test_applied_lr(kvstore, scaling, expected):
    assert optim.applied_lr(0.02, scaling, kvstore, 4) == pytest.approx(expected)


@pytest.mark.parametrize("kvstore", ["local", "ps-sync", "ps-async", "allreduce"])
def test_linear_scaling_of_one_worker_is_the_lr_itself(kvstore):
    assert optim.applied_lr(0.05, "linear", kvstore, 1) == 0.05


def test_linear_scaling_grows_with_the_sync_workers():
    assert [optim.applied_lr(0.01, "linear", "ps-sync", n) for n in (1, 2, 8)] == \
        pytest.approx([0.01, 0.02, 0.08])


def test_unknown_scaling_is_refused():
    with pytest.raises(ValueError, match="none or linear"):
        optim.applied_lr(0.02, "sqrt", "ps-sync", 4)


@pytest.mark.parametrize("kvstore,expected", [("local", 32), ("ps-sync", 128),
                                              ("ps-async", 32), ("allreduce", 32)])
def test_step_normalises_dist_sync_by_the_global_batch_only(kvstore, expected):
    assert optim.step_samples(32, kvstore, 4) == expected


def test_cells_get_their_models_default_lr_unless_given():
    assert CellConfig(model="lenet-mlp", layers=None).lr == optim.default_lr("lenet-mlp")
    assert CellConfig(model="resnet").lr == optim.default_lr("resnet")
    assert CellConfig(model="lenet-cnn", layers=None, lr=0.3).lr == 0.3


@pytest.mark.parametrize("change", [dict(momentum=0.5), dict(wd=0.0),
                                    dict(lr_scaling="linear"), dict(lr=0.05)])
def test_optimizer_settings_are_part_of_a_cells_identity(change):
    base = CellConfig(model="lenet-mlp", layers=None)
    assert CellConfig(model="lenet-mlp", layers=None, **change).cell_id != base.cell_id


def test_cells_default_to_sgd_momentum_09_wd_1e4_and_no_scaling():
    cell = CellConfig(model="resnet")
    assert (cell.momentum, cell.wd, cell.lr_scaling) == (0.9, 1e-4, "none")
    assert (optim.DEFAULT_MOMENTUM, optim.DEFAULT_WD) == (0.9, 1e-4)
    assert cell.tags()["momentum"] == "0.9" and cell.tags()["lr"] == "0.05"


def test_the_default_lr_and_the_same_lr_given_are_the_same_cell():
    default = CellConfig(model="lenet-cnn", layers=None)
    given = CellConfig(model="lenet-cnn", layers=None, lr=optim.default_lr("lenet-cnn"))
    assert default.cell_id == given.cell_id


def test_expand_gives_each_model_its_default_lr_or_every_listed_lr():
    cells = grid.expand(engines=["mxnet"], models=["lenet-mlp", "resnet"], layers=[20],
                        batches=[32], devices=[1], syncs=["sync"])
    assert {c.model: c.lr for c in cells} == {"lenet-mlp": 0.02, "resnet": 0.05}
    cells = grid.expand(engines=["mxnet"], models=["lenet-mlp"], layers=[None], batches=[32],
                        devices=[2], syncs=["sync"], lr=[0.01, 0.1], momentum=0.5, wd=0.0,
                        lr_scaling="linear")
    assert [c.lr for c in cells] == [0.01, 0.1]
    assert all((c.momentum, c.wd, c.lr_scaling) == (0.5, 0.0, "linear") for c in cells)


@pytest.mark.parametrize("change,words", [
    (dict(momentum=1.0), ["--momentum 1.0 is outside [0, 1)", "--momentum 0.9"]),
    (dict(momentum=-0.1), ["--momentum -0.1", "--momentum 0.9"]),
    (dict(momentum=float("nan")), ["--momentum nan", "--momentum 0.9"]),
    (dict(wd=-1.0), ["--wd -1.0 is outside [0, 1)", "--wd 0.0001"]),
    (dict(wd=float("inf")), ["--wd inf", "--wd 0.0001"]),
    (dict(lr_scaling="square"), ["--lr-scaling 'square' is unknown", "none or linear"]),
])
def test_validate_refuses_bad_optimizer_settings_naming_the_fix(change, words):
    with pytest.raises(ConfigError) as err:
        grid.validate(CellConfig(model="lenet-mlp", layers=None, **change))
    for word in words:
        assert word in str(err.value)


@pytest.mark.parametrize("change", [dict(momentum=0.0), dict(momentum=0.99), dict(wd=0.0),
                                    dict(lr_scaling="linear")])
def test_validate_accepts_the_edges_of_the_ranges(change):
    grid.validate(CellConfig(model="lenet-mlp", layers=None, **change))
