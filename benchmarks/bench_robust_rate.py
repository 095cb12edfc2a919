"""How far the same cell's rate wanders from run to run: the first epoch's figure against
the run's robust one. Prints each figure's median samples/s and its spread.

The same cell runs ``--repeats`` times on the local cluster (torch, one device,
LeNet-MLP at batch 64 on 12,000 synthetic samples, 2 epochs by default: the fastest
cell edgeprof runs, whose first epoch lasts 0.16 s). Each run gives
``steady_s_per_sample`` (the first epoch without its first step) and
``robust_s_per_sample`` (``profiler.timeline.rate``: the run's steps in blocks, slow
blocks left out); the spread is (max - min) / median of each. Goal: the robust figure's
spread at most half the first epoch's, or both within 5%.

    python benchmarks/bench_robust_rate.py [--repeats 10] [--engine torch] [--devices 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("OMP_NUM_THREADS", "1")

from profiler.cluster.local import LocalCluster  # noqa: E402
from profiler.engines import get_engine  # noqa: E402
from profiler.engines.base import TrainOptions  # noqa: E402
from profiler.sweep.grid import CellConfig  # noqa: E402
from profiler.sweep.runner import run_cell  # noqa: E402

COLUMNS = ("steady_s_per_sample", "robust_s_per_sample")


def spread(rates: list[float]) -> float:
    return (max(rates) - min(rates)) / statistics.median(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", default="torch")
    parser.add_argument("--model", default="lenet-mlp")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--samples", type=int, default=12000)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    cell = CellConfig(engine=args.engine, model=args.model, batch=args.batch,
                      devices=args.devices, sync="sync", epochs=args.epochs,
                      max_samples=args.samples, dataset="synthetic")
    engine = get_engine(args.engine)
    rates: dict[str, list[float]] = {c: [] for c in COLUMNS}
    with tempfile.TemporaryDirectory(prefix="edgeprof-bench-") as tmp:
        for i in range(args.repeats):
            record = run_cell(cell, LocalCluster(engine.nodes_needed(cell)), engine,
                              Path(tmp) / f"run-{i}", TrainOptions(val_samples=64),
                              sweep_id="bench", timeout_s=600, monitor_interval_s=None)
            if record["status"] != "ok" or not all(record.get(c) for c in COLUMNS):
                raise SystemExit(f"run {i}: {record['status']} {record.get('reason')}")
            for c in COLUMNS:
                rates[c].append(1.0 / record[c])
            print(f"run {i}: steady {rates[COLUMNS[0]][-1]:9.0f}  robust "
                  f"{rates[COLUMNS[1]][-1]:9.0f} samples/s  epochs {record['epoch_s']}  "
                  f"slow blocks {record.get('robust_slow_blocks')}", flush=True)
    print(f"{args.engine} {args.model} b{args.batch} d{args.devices}, {args.samples} "
          f"samples, {args.epochs} epochs, {args.repeats} runs")
    for c in COLUMNS:
        r = rates[c]
        print(f"{c:<20} median {statistics.median(r):9.0f} samples/s  [{min(r):.0f}-"
              f"{max(r):.0f}]  spread {spread(r):.1%}")
    steady, robust = (spread(rates[c]) for c in COLUMNS)
    met = robust <= steady / 2 or max(steady, robust) <= 0.05
    print(f"goal: robust spread <= half the first epoch's, or both <= 5%: "
          f"{'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()
