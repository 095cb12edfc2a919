"""benchmarks/bench_study_causes.py part D: what the link predicts for MXNet's KVStore
with a server beside every worker (``wire_ms``), from the model's arrays."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_study_causes.py"
LENET_MLP = [100352, 128, 8192, 64, 640, 10]  # its arrays in the KVStore's key order


def _bench():
    spec = importlib.util.spec_from_file_location("bench_study_causes", PATH)
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench
    spec.loader.exec_module(bench)
    return bench


@pytest.mark.parametrize("nodes, ms", [
    # two nodes: keys 0, 2, 4 (all but the biases) on server 0: 0.437 MB in, then out
    (2, 69.9),
    # five: key 0 (the 100,352-weight layer, 92% of the bytes) on server 0, which
    # takes it in from four workers and sends it back to four
    (5, 256.9),
    (9, 513.8),
])
def test_the_busiest_link_carries_the_big_arrays_server_to_every_other_worker(nodes, ms):
    assert _bench().wire_ms(LENET_MLP, nodes, 100) == pytest.approx(ms, abs=0.1)


def test_an_array_past_the_bound_is_split_evenly():
    # one array of 2 M elements over 4 servers: each node takes in 3 workers' quarters
    # (and sends 3 quarters of its own worker's elsewhere): 6 MB each way at 100 Mbit
    assert _bench().wire_ms([2_000_000], 4, 100) == pytest.approx(2 * 6e6 * 8 / 1e8 * 1000)
