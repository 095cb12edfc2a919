"""The exchange check's decision (``profiler.calibrate.exchange``) from a table of probe
rounds, which exchanges a sweep's cells get checked, and how the report names it. The
probe itself runs on a real two-node cluster in tests/integration/test_exchange_probe.py."""

from __future__ import annotations

import pytest

from profiler.calibrate.check import exchanges_used
from profiler.calibrate.exchange import TOLERANCE, judged, step_bytes
from profiler.cell import CellConfig
from profiler.cluster.profiles import PACKAGED_PROFILES, load_catalog
from profiler.report.build import profile_check_said

PROFILE = load_catalog([PACKAGED_PROFILES]).profiles["pi3b-park2019"]  # 100 Mbit
MLP_BYTES = 4 * 109386  # LeNet-MLP's parameters in float32: 70.0 ms there and back


def test_a_step_moves_the_models_parameters_in_float32():
    assert step_bytes("lenet-mlp", None) == MLP_BYTES


@pytest.mark.parametrize("rounds_ms, tiny_ms, k, expected_ms, ratio, within", [
    # measured on this host (docs/study.md): the profile's link, at k 1 and 2
    ([71.4, 70.8, 74.0], [0.1, 0.1], 1, 70.1, 1.02, True),
    ([36.8, 37.5, 38.0], [0.05, 0.05], 2, 70.1, 1.07, True),
    # the tbf at half the profile's rate (50 Mbit): 2.04-2.16 x
    ([144.6, 145.0, 146.0], [0.1, 0.1], 1, 70.1, 2.07, False),
    # at twice it (200 Mbit): 0.50-0.58 x
    ([39.7, 39.0, 40.0], [0.1, 0.1], 1, 70.1, 0.57, False),
    # the per-message cost is part of what is expected: a host whose nodes wake slowly
    ([80.0, 81.0, 79.0], [10.0, 10.0], 1, 80.0, 1.00, True),
    # at the tolerance's edges
    ([87.5], [0.0], 1, 70.0, 1.25, True),
    ([88.0], [0.0], 1, 70.0, 1.257, False),
    ([56.1], [0.0], 1, 70.0, 0.80, True),
    ([55.5], [0.0], 1, 70.0, 0.793, False),
])
def test_the_exchange_is_judged_against_wire_plus_message(rounds_ms, tiny_ms, k,
                                                          expected_ms, ratio, within):
    check = judged(PROFILE, "lenet-mlp", "lenet-mlp", k, MLP_BYTES,
                   [ms / 1000 for ms in rounds_ms], [ms / 1000 for ms in tiny_ms])
    assert check.expected_ms == pytest.approx(expected_ms, abs=0.2)
    assert check.ratio == pytest.approx(ratio, abs=0.01)
    assert check.within is within
    assert check.tolerance == TOLERANCE


def test_the_record_keeps_the_numbers_and_says_it_is_the_exchange():
    check = judged(PROFILE, "lenet-mlp", "lenet-mlp", 2, MLP_BYTES, [0.036, 0.040, 0.037],
                   [0.0001] * 3)
    record = check.as_record()
    assert record["check"] == "exchange" and record["action"] == "none"
    assert record["measured_ms"] == 74.0 and record["wire_ms"] == pytest.approx(70.0, abs=0.1)
    assert record["spread"] == pytest.approx(0.108, abs=0.001) and record["rounds"] == 3
    assert record["link_mbit"] == 100 and record["within"]
    assert "74 board-ms" in check.line() and "1.05 x" in check.line()


def _cell(model, devices, layers=None, **kwargs):
    return CellConfig(model=model, layers=layers, batch=64, devices=devices, **kwargs)


def test_only_multi_node_cells_of_a_family_with_a_board_rate_are_probed_at_their_k():
    cells = [_cell("lenet-mlp", 1), _cell("lenet-mlp", 5), _cell("lenet-mlp", 10),
             _cell("resnet", 4, 20), _cell("resnet", 4, 110), _cell("lenet-cnn", 1)]
    used = exchanges_used(PROFILE, cells, 1.0, 2.0)
    assert used == [("lenet-mlp", None, "lenet-mlp", 1.0), ("resnet", 110, "resnet-110", 1.0)]
    # one device only: no exchange to check
    assert exchanges_used(PROFILE, [_cell("lenet-mlp", 1)], 1.0, 2.0) == []
    # dilated: the k the multi-node cells get (LeNet-MLP's 2-device cell fits k 2 here)
    assert exchanges_used(PROFILE, [_cell("lenet-mlp", 2, max_speedup=2)], 2.0, 2.0) == [
        ("lenet-mlp", None, "lenet-mlp", 2.0)]


def test_the_report_names_the_exchange_beside_the_compute_check():
    compute = {"profile": "pi3b-park2019", "model": "lenet-mlp", "workload": "lenet-mlp batch 64",
               "speedup": 1.0, "ratio": 1.02, "within": True, "tolerance": 0.1,
               "action": "none", "train_s": 2.6}
    exchange = judged(PROFILE, "lenet-mlp", "lenet-mlp", 4, MLP_BYTES, [0.025] * 3,
                      [0.0001] * 3).as_record()
    exchange["action"] = "warned"
    said = profile_check_said([compute, exchange])
    assert said == ("pi3b-park2019 on this host: lenet-mlp batch 64 1.02 x the board's rate "
                    "over 2.6 s (within x/÷1.1); lenet-mlp's exchange at speedup 4 1.42 x "
                    "the 70 ms a step its 100 Mbit link predicts (outside x/÷1.25), warned "
                    "(a link is not re-calibrated)")
