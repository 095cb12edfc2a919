"""benchmarks/bench_allreduce.py: its floor, interval and tables, and bad input."""

from __future__ import annotations

import importlib.util
import math
import subprocess
import sys
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_allreduce.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_allreduce", PATH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_the_ring_floor_is_2_n_minus_1_over_n_times_size_over_the_link():
    bench = _bench()
    # 64 MB at 100 Mbit: one node's share at N = 2 is the whole tensor once, 5.37 s.
    assert bench.ring_floor_s(64 << 20, 2, 100) == pytest.approx(64 * 2**20 * 8 / 100e6)
    assert bench.ring_floor_s(64 << 20, 8, 1000) == pytest.approx(
        2 * 7 / 8 * 64 * 2**20 * 8 / 1e9)
    assert [bench.size_text(s) for s in (bench.SIZES[0], bench.SIZES[-1])] == ["4 KB", "64 MB"]
    assert bench.parse_size("16M") == 16 << 20 and bench.parse_size("4k") == 4 << 10


def test_the_interval_is_students_t_over_the_repeats():
    bench = _bench()
    mean, half = bench.interval([1.0, 2.0, 3.0])
    assert mean == 2.0 and half == pytest.approx(4.303 / math.sqrt(3))
    assert math.isnan(bench.interval([1.0])[1])


def test_the_end_to_end_table_puts_mpi_over_gloo_per_model_and_count(capsys):
    bench = _bench()
    rows = [{"profile": "pi3b", "model": "lenet-mlp", "devices": 2, "ops": ops,
             "repeat": r, "status": "ok", "samples_per_s": rate, "reason": ""}
            for ops, rates in (("gloo", (1000.0, 1100.0)), ("mpi", (500.0, 550.0)))
            for r, rate in enumerate(rates)]
    rows.append({**rows[0], "devices": 4, "status": "failed", "reason": "worker-1 died"})
    bench.print_end_to_end(rows)
    out = capsys.readouterr().out
    assert "| pi3b | lenet-mlp | 2 | 1050 ± 635 | 525 ± 318 | 0.50 |" in out
    # A failed cell is named, not averaged in.
    assert "gloo lenet-mlp N=4: failed worker-1 died" in out
    assert "| pi3b | lenet-mlp | 4 | - | - | - |" in out


@pytest.mark.parametrize("args, says", [
    (["--ops", "gloo,nccl"], "--ops 'gloo,nccl': choose from gloo, mpi, torch"),
    (["--sizes", "4Q"], "--sizes '4Q': not a comma-separated list of sizes"),
    (["--nodes", "1"], "--nodes '1': node counts from 2 to 64"),
])
def test_bad_input_is_one_line_and_exit_2(args, says):
    done = subprocess.run([sys.executable, str(PATH), *args], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert says in done.stderr and "Traceback" not in done.stderr
