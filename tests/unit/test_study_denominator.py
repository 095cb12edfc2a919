"""The closing line on the one-device cells' pace against the board (``study/pace.py``):
every N / 1 ratio divides by those cells, so the line says how far the verdicts can
hold, and warns when a model's median lies past the check's tolerance.

Records are shaped as a sweep writes them (``robust_s_per_sample`` in host seconds, the
cell's ``speedup``), on the packaged ``pi3b-park2019`` profile's board rates.
"""

from __future__ import annotations

import pytest

from profiler.cluster.profiles import PACKAGED_PROFILES, load_catalog
from profiler.study.pace import denominator_note, one_device_paces

PROFILE = "pi3b-park2019"
LENET_MLP_BOARD = 571.4  # samples/s, batch 64 (profiles.yaml's board_rates)


@pytest.fixture
def catalog():
    return load_catalog([PACKAGED_PROFILES])


def _cell(pace: float, devices: int = 1, speedup: float = 1.0, batch: int = 64,
          model: str = "lenet-mlp", status: str = "ok", profiles=None) -> dict:
    """A cell whose board-time rate is ``pace`` x the board's, trained at ``speedup``."""
    host_s_per_sample = 1 / (LENET_MLP_BOARD * pace) / speedup
    return {"devices": devices, "status": status, "model": model, "batch": batch,
            "layers": None, "speedup": speedup, "robust_s_per_sample": host_s_per_sample,
            "node_profiles": profiles if profiles is not None else
            {f"n{i}": PROFILE for i in range(devices)}}


def test_the_one_device_cells_pace_is_their_board_time_rate_over_the_board_s(catalog):
    records = [_cell(0.94), _cell(1.01, speedup=2.0), _cell(0.5, devices=5)]
    paces = one_device_paces(records, catalog)
    assert list(paces) == ["lenet-mlp"]
    assert paces["lenet-mlp"] == pytest.approx([0.94, 1.01])


def test_cells_the_board_rate_does_not_describe_give_no_pace(catalog):
    records = [_cell(1.0, batch=32), _cell(1.0, status="failed"),
               _cell(1.0, profiles={"n0": "pi4"}), _cell(1.0, profiles={}),
               _cell(1.0, model="lenet-cnn", batch=32)]
    assert one_device_paces(records, catalog) == {}
    assert denominator_note({}) is None


def test_the_note_shows_each_model_s_range_and_warns_past_the_tolerance(catalog):
    held = denominator_note(one_device_paces([_cell(0.94), _cell(1.01)], catalog))
    assert held == ("the one-device cells (every N / 1 ratio's denominator) trained at "
                    "lenet-mlp 0.94-1.01 x the board's rate")
    drifted = denominator_note({"lenet-mlp": [0.65, 0.76, 0.94], "lenet-example": [1.05]})
    assert "lenet-example 1.05, lenet-mlp 0.65-0.94 x the board's rate" in drifted
    assert "; lenet-mlp off by more than x/\u00f71.1: its ratios to one device" in drifted
    assert "lenet-example off" not in drifted
    # The tolerance is a factor both ways: 1.1 x is within, 1 / 1.1 too.
    assert "off by" not in denominator_note({"lenet-mlp": [1.1]})
    assert "off by" not in denominator_note({"lenet-mlp": [1 / 1.1]})
    assert "off by" in denominator_note({"lenet-mlp": [0.9]})
    assert "off by" in denominator_note({"lenet-mlp": [1.12]})
