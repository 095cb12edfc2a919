"""The step model of ``edgeprof predict`` on synthetic cells made from known parameters:
the fit recovers them, its interval covers the truth as often as it says, and the
schemes, boards and links scale the terms as docs/predict.md writes them down."""

from __future__ import annotations

import math
import random

import pytest

from profiler.cluster.profiles import load_catalog
from profiler.errors import ConfigError
from profiler.predict.boards import OneDevice, compute_scale, parse_devices, parse_links
from profiler.predict.cells import Cell, Group, base_key, one_device_of
from profiler.predict.fit import LEVEL, expected_max_normal, fit_nonnegative
from profiler.predict.model import Target, fit_group, predict
from profiler.predict.scheme import Scheme

PARAMETERS = 431_080  # LeNet-MLP's
MODEL_BYTES = PARAMETERS * 4
CATALOG = load_catalog()
BOARD = "pi3b-park2019"


def _cell(devices: int, step_ms: float, board: str | None = BOARD) -> Cell:
    return Cell(devices=devices, step_ms=step_ms, sigma_ms=None, parameters=PARAMETERS,
                train_samples=6400, board=board, cpu_percent=None, cell_id=f"c{devices}",
                record={})


def _group(scheme: Scheme, truth, devices=(2, 3, 4), noise_ms=0.0, seed=0,
           board: str | None = BOARD, sync="sync") -> Group:
    rng = random.Random(seed)
    base = [_cell(1, truth(1) + rng.gauss(0, noise_ms), board)]
    cells = [_cell(n, truth(n) + rng.gauss(0, noise_ms), board) for n in devices]
    key = ("lenet-mlp", None, 64, "mxnet", sync, scheme.placement, "replicate", "mnist-5k")
    return Group(key, scheme, cells, base)


def _truth_master(base_ms=110.0, round_ms=20.0, peer_ms=15.0, wire=1.0, link_mbit=100.0):
    scheme = Scheme("ps-sync", "master")

    def step(n: int) -> float:
        x = scheme.features(n, MODEL_BYTES, link_mbit)
        return base_ms + round_ms * x[0] + peer_ms * x[1] + wire * x[2]
    return scheme, step


def test_expected_max_of_normals():
    assert expected_max_normal(1) == 0
    assert expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), abs=1e-4)
    assert expected_max_normal(10) == pytest.approx(1.5388, abs=1e-3)  # tabled value


def test_fit_recovers_known_terms_without_noise():
    scheme, truth = _truth_master()
    model = fit_group(_group(scheme, truth), CATALOG)
    assert model.base_ms == pytest.approx(110.0)
    assert model.fit.term("round_ms") == pytest.approx(20.0, rel=1e-6)
    assert model.fit.term("peer_ms") == pytest.approx(15.0, rel=1e-6)
    assert model.fit.term("wire") == pytest.approx(1.0, rel=1e-6)
    p = predict(model, 50, Target(None, None), CATALOG, None)
    assert p.step_ms == pytest.approx(truth(50), rel=1e-6)


def test_on_one_link_the_masters_growth_past_the_ideal_wire_is_the_boards_cpu():
    # A master's N x B on one link grows as its per-peer cost does: the fit cannot tell
    # them apart, holds the wire at its ideal time and gives the rest to the CPU, which
    # another board scales and another link does not.
    scheme, truth = _truth_master(round_ms=0.0, peer_ms=0.0, wire=3.0, link_mbit=1000.0)
    model = fit_group(_group(scheme, truth, board="pi4-park2019"), CATALOG)
    assert model.fit.term("wire") == 1.0 and model.fit.term("peer_ms") > 0
    assert 2 not in model.fit.kept  # held at its floor: no degree of freedom spent on it
    p = predict(model, 6, Target(None, None), CATALOG, None)
    assert p.step_ms == pytest.approx(truth(6), rel=1e-6)
    ideal_ms = scheme.features(6, MODEL_BYTES, 1000.0)[2]
    one = OneDevice({"pi3b-park2019": 3 * 110.0}, {"pi3b-park2019": "a sweep"})
    on_pi3b = predict(model, 6, Target("pi3b-park2019", 1000.0), CATALOG, None, one)
    assert on_pi3b.step_ms == pytest.approx(3 * (truth(6) - ideal_ms) + ideal_ms, rel=1e-6)


def test_a_term_fitted_below_its_floor_is_held_there():
    # y grows with N only: a constant fitted below zero is noise, and is held at zero.
    fit = fit_nonnegative(("round_ms", "peer_ms", "wire"),
                          [[1, 0, 2.0], [1, 0, 3.0], [1, 0, 4.0]], [3.9, 6.1, 8.0])
    assert fit.term("round_ms") == 0 and fit.term("wire") > 0
    assert 0 not in fit.kept and fit.dof == 2


def test_a_link_is_never_fitted_faster_than_its_rate():
    # Fitted where the wire hides in the noise (a flat step), the wire stays at 1 x the
    # ideal wire time, so a slower link still costs at least its bytes' time.
    scheme = Scheme("ps-sync", "master")
    model = fit_group(_group(scheme, lambda n: 110.0 + (30.0 if n > 1 else 0)), CATALOG)
    assert model.fit.term("wire") == 1.0 and model.fit.term("round_ms") < 30.0
    slow = predict(model, 8, Target(None, 10.0), CATALOG, None)
    assert slow.step_ms > 8 * MODEL_BYTES * 8 / 10e6 * 1e3


def test_the_interval_covers_the_truth_as_often_as_it_says():
    scheme, truth = _truth_master()
    inside, runs = 0, 300
    for seed in range(runs):
        group = _group(scheme, truth, devices=(2, 3, 4, 5), noise_ms=8.0, seed=seed)
        model = fit_group(group, CATALOG)
        p = predict(model, 8, Target(None, None), CATALOG, None)
        # The truth as a new measurement would show it: its own noise in.
        measured = truth(8) + random.Random(10_000 + seed).gauss(0, 8.0)
        inside += p.low_ms <= measured <= p.high_ms
    # Nominal 90%; the base's own noise is outside the interval, so a little under.
    assert LEVEL - 0.12 <= inside / runs <= 0.99


def test_without_a_degree_of_freedom_there_is_no_interval():
    scheme, truth = _truth_master()
    model = fit_group(_group(scheme, truth, devices=(2, 3)), CATALOG)
    p = predict(model, 8, Target(None, None), CATALOG, None)
    assert p.low_ms is None and p.high_ms is None


def test_ring_moves_2_n_minus_1_over_n_and_the_master_n_times_the_model():
    ring, ps = Scheme("allreduce"), Scheme("ps-sync", "master")
    assert ring.busiest_link_bytes(4, 100) == pytest.approx(150)
    assert ring.worker_bytes(4, 100) == pytest.approx(300)
    assert ps.busiest_link_bytes(4, 100) == 400 and ps.worker_bytes(4, 100) == 200
    assert ring.features(1, 100, 100) == [0, 0, 0]


def test_a_faster_link_shrinks_only_the_wire_term():
    scheme, truth = _truth_master(round_ms=20.0, wire=1.0)
    model = fit_group(_group(scheme, truth), CATALOG)
    slow = predict(model, 20, Target(None, 100.0), CATALOG, None)
    fast = predict(model, 20, Target(None, 1000.0), CATALOG, None)
    wire_100_ms = 20 * MODEL_BYTES * 8 / 100e6 * 1e3
    assert slow.step_ms - fast.step_ms == pytest.approx(wire_100_ms * 0.9, rel=1e-6)


def test_boards_scale_by_their_boards_cores_not_a_calibrated_quota():
    pi3b_park, pi3b, pi4 = (CATALOG.profiles[n] for n in (BOARD, "pi3b", "pi4"))
    assert compute_scale(CATALOG, pi3b_park, pi3b, "lenet-mlp")[0] == pytest.approx(1.0)
    assert compute_scale(CATALOG, pi3b_park, pi4, "lenet-mlp")[0] == pytest.approx(0.3 / 0.7)


def test_a_board_ratio_measured_here_beats_calibrated_rates_and_cores():
    # Synthetic Pi 4 cells (base 46 ms, 26 ms per async peer); the Pi 3B's one-device step
    # measured at 3.3 x the Pi 4's where the boards' cores say 2.33: the ratio recovered is
    # the measured one, it scales compute and the per-peer CPU alike, and it says so.
    scheme = Scheme("ps-async", "master")

    def truth(n: int) -> float:
        x = scheme.features(n, MODEL_BYTES, 1000.0)
        return 46.0 + 26.0 * x[1] + x[2]
    model = fit_group(_group(scheme, truth, board="pi4-park2019", sync="async"), CATALOG)
    pi4, pi3b = CATALOG.profiles["pi4-park2019"], CATALOG.profiles[BOARD]
    cores, said = compute_scale(CATALOG, pi4, pi3b, "lenet-mlp")
    assert cores == pytest.approx(0.7 / 0.3) and "cpu_cores" in said
    one = OneDevice({BOARD: 46.0 * 3.3}, {BOARD: "runs/pi3b"})
    measured = predict(model, 1, Target(BOARD, 1000.0), CATALOG, None, one)
    assert measured.compute_scale == pytest.approx(3.3)
    assert measured.step_ms == pytest.approx(46.0 * 3.3)
    assert "measured" in measured.scale_from and "runs/pi3b" in measured.scale_from
    four = predict(model, 4, Target(BOARD, 1000.0), CATALOG, None, one)
    wire_ms = scheme.features(4, MODEL_BYTES, 1000.0)[2]
    assert four.step_ms == pytest.approx(3.3 * (46.0 + 26.0 * 3) + wire_ms, rel=1e-6)
    # Without a measurement of the target: the cores, as before.
    assert predict(model, 1, Target(BOARD, 1000.0), CATALOG, None).compute_scale == (
        pytest.approx(0.7 / 0.3))


def test_a_sweeps_one_device_cells_give_the_board_ratio():
    # A Pi 4 sweep fitted, a Pi 3B sweep's one-device cells (150 and 152 ms) read as its
    # rate: the ratio recovered is 151 / 46, and the 1-device prediction is their mean.
    scheme, truth = _truth_master(base_ms=46.0)
    pi4 = _group(scheme, truth, board="pi4-park2019")
    pi3b = _group(scheme, lambda n: 150.0, devices=(), board=BOARD)
    pi3b.base.append(_cell(1, 152.0, BOARD))
    rates = one_device_of([("runs/pi4", [pi4]), ("runs/pi3b", [pi3b])])[base_key(pi4)]
    assert rates.ms == {"pi4-park2019": 46.0, BOARD: 151.0}
    model = fit_group(pi4, CATALOG)
    p = predict(model, 1, Target(BOARD, None), CATALOG, None, rates)
    assert p.compute_scale == pytest.approx(151.0 / 46.0) and p.step_ms == pytest.approx(151)
    assert "runs/pi3b" in p.scale_from
    # A mix's or a local sweep's one-device cells name no one board: no rate.
    local = _group(scheme, truth, devices=(), board=None)
    assert one_device_of([("runs/local", [local])]) == {}


def test_rates_from_that_measured_no_fitted_configuration_is_one_line():
    # --rates-from naming a sweep of another model would scale no board: said, not silent.
    from pathlib import Path

    from profiler.predict.run import _check_rates_match
    scheme, truth = _truth_master(base_ms=46.0)
    model = fit_group(_group(scheme, truth, board="pi4-park2019"), CATALOG)
    lenet = _group(scheme, lambda n: 150.0, devices=(), board=BOARD)
    other = Group(("resnet", *lenet.key[1:]), scheme, [], lenet.base)
    measured = one_device_of([("runs/resnet", [other])])
    with pytest.raises(ConfigError, match=r"^--rates-from runs/resnet: no one-device cell"
                       r".*lenet-mlp"):
        _check_rates_match((Path("runs/resnet"),), measured, [model])
    matching = one_device_of([("runs/pi3b", [_group(scheme, truth, devices=(), board=BOARD)])])
    _check_rates_match((Path("runs/pi3b"),), matching, [model])  # no error
    _check_rates_match((), {}, [model])  # not asked: nothing to check


def test_sync_follows_the_slowest_board_async_adds_the_workers_rates():
    truth_sync = _truth_master()
    sync = fit_group(_group(*truth_sync), CATALOG)
    on_pi4 = predict(sync, 4, Target("pi4", 100.0), CATALOG, None)
    # A mix of 2 Pi 4 and 2 Pi 3B: the master is a Pi 4, the sync round waits for a Pi 3B.
    mix = predict(sync, 4, Target("mix-2pi4-2pi3b", 100.0), CATALOG, None)
    assert mix.step_ms > on_pi4.step_ms
    scheme = Scheme("ps-async", "master")
    asynchronous = fit_group(_group(scheme, truth_sync[1], sync="async"), CATALOG)
    a_mix = predict(asynchronous, 4, Target("mix-2pi4-2pi3b", 100.0), CATALOG, None)
    a_pi3b = predict(asynchronous, 4, Target("pi3b", 100.0), CATALOG, None)
    a_pi4 = predict(asynchronous, 4, Target("pi4", 100.0), CATALOG, None)
    assert a_pi3b.samples_per_s < a_mix.samples_per_s < a_pi4.samples_per_s


def test_what_is_missing_to_fit_is_named():
    scheme, truth = _truth_master()
    with pytest.raises(ConfigError, match=r"needs cells at >= 2 device counts .* "
                                          r"lenet-mlp b64 mxnet sync \(its cells are at 2 only\)"):
        fit_group(_group(scheme, truth, devices=(2,)), CATALOG)
    no_base = _group(scheme, truth)
    no_base.base = []
    with pytest.raises(ConfigError, match="needs an ok cell at 1 device"):
        fit_group(no_base, CATALOG)


@pytest.mark.parametrize("text", ["0", "-3", "4,x", ""])
def test_bad_device_counts_are_refused(text):
    with pytest.raises(ConfigError, match="--devices"):
        parse_devices(text)


def test_links_parse_and_bad_ones_are_refused():
    assert parse_links("100mbit,1gbit,2.5G") == [100.0, 1000.0, 2500.0]
    assert parse_links(None) == [None]
    for bad in ("fast", "0mbit", "100kbit"):
        with pytest.raises(ConfigError, match="--link"):
            parse_links(bad)
