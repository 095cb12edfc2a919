"""Which cluster (``edgeprof predict --compare``) on hand-made cells of a known ring
allreduce on Pi 3Bs: each board's rate scaled by its cores, and the crossover where
adding a board stops paying found where the model's own curve puts it."""

from __future__ import annotations

import pytest

from profiler.cluster.profiles import load_catalog
from profiler.predict import which
from profiler.predict.boards import PriceOf
from profiler.predict.cells import groups_of
from profiler.predict.model import Target, fit_group
from profiler.cluster.prices import load_prices

BASE_MS, PEER_MS, PARAMETERS, BATCH = 100.0, 20.0, 1_000, 32
LINK_MBIT = 100.0  # pi3b's


def _wire_ms(n: int) -> float:
    return 2 * PARAMETERS * 4 * (n - 1) / n * 8 / (LINK_MBIT * 1e6) * 1e3 if n > 1 else 0.0


def _truth_ms(n: int) -> float:
    return BASE_MS + PEER_MS * (n - 1) + _wire_ms(n)


def _record(n: int, repeat: int) -> dict:
    return {"status": "ok", "cell_id": f"c{n}-{repeat}", "model": "lenet-mlp", "layers": None,
            "batch": BATCH, "engine": "torch-ddp", "sync": "sync", "placement": "master",
            "data_partition": "replicate", "dataset": "mnist", "devices": n,
            "steady_step_ms": _truth_ms(n) + (0.5 if repeat else -0.5),
            "parameters": PARAMETERS, "train_samples": 6400, "cluster": "emulated",
            "node_profiles": {f"n{i}": "pi3b" for i in range(n)},
            "worker_nodes": {str(i): f"n{i}" for i in range(n)}, "cpu_percent_mean": 90.0}


@pytest.fixture(scope="module")
def model():
    groups, _ = groups_of([_record(n, r) for n in (1, 2, 3, 4) for r in (0, 1)])
    return fit_group(groups[0], load_catalog())


def _expected_crossover() -> int:
    """From the truth: the N from which each further board adds < 10% of one's rate."""
    rate = [BATCH * n / _truth_ms(n) * 1e3 for n in range(1, 300)]
    paying = [n for n in range(2, 300) if rate[n - 1] - rate[n - 2] >= 0.1 * rate[0]]
    return max(paying) + 1


def test_the_crossover_is_where_the_curve_puts_it(model):
    catalog, prices = load_catalog(), PriceOf(load_prices())
    found = which.crossover(model, Target("pi3b", None), catalog, prices)
    assert found.one_board_samples_per_s == pytest.approx(BATCH / BASE_MS * 1e3, rel=0.01)
    # 100 ms + 20 ms a peer: the 11th board is the first to add under 32 samples/s.
    assert _expected_crossover() == 11 and found.devices == 11
    # A Pi 4 computes 0.7 / 0.3 as fast (the boards' cores); the peer cost is its CPU
    # work too, so its curve is the Pi 3B's, scaled.
    pi4 = which.crossover(model, Target("pi4", None), catalog, prices)
    assert pi4.one_board_samples_per_s == pytest.approx(
        found.one_board_samples_per_s * 0.7 / 0.3, rel=0.01)


def test_the_table_sets_the_boards_side_by_side(model):
    catalog, prices = load_catalog(), PriceOf(load_prices())
    from profiler.predict.model import predict
    predictions = [predict(model, n, Target(b, None), catalog, prices)
                   for b in ("pi3b", "pi4") for n in (4, 8)]
    crossovers = [which.crossover(model, Target(b, None), catalog, prices)
                  for b in ("pi3b", "pi4")]
    out = which.text(predictions, [model], [], crossovers)
    rows = [line.split() for line in out.splitlines()
            if line.startswith("lenet-mlp b32 torch-ddp sync  ")]
    assert [(r[4], r[5]) for r in rows] == [("pi3b", "4"), ("pi4", "4"), ("pi3b", "8"),
                                            ("pi4", "8")]
    for r in rows:  # samples/s, J per sample and USD per epoch all priced
        assert float(r[6].replace(",", "")) > 0 and float(r[7]) > 0 and float(r[8]) > 0
    assert "on pi3b: adding a board stops paying at 11 boards" in out
    data = which.as_json(predictions, [model], [], crossovers)
    assert [c["devices"] for c in data["crossovers"]] == [11, 11]
    assert data["predictions"][0]["j_per_sample"] > 0
    jps = which.j_per_sample(predictions[0])
    watts = sum([catalog.profiles["pi3b"].power.watts(0.9)] * 4)
    assert jps == pytest.approx(watts / predictions[0].samples_per_s, rel=1e-6)
