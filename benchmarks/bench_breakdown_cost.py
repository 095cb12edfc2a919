"""What timing every step costs: worker samples/s with the step breakdown on against off.

For each engine (MXNet ``dist_sync``, the torch parameter server, torch DDP and
Horovod: the study's parameter-server engines and the allreduce ones) the same cell
runs with ``--breakdown on`` and ``off``, alternating, ``--repeats`` times each, on
the local cluster (loopback: no root needed) or the emulated one. Each run's rate is the
workers' steady rate (the first step out: ``steady_s_per_sample``); the ratio is the
median of on over the median of off. Goal: >= 0.97.

    python benchmarks/bench_breakdown_cost.py                       # lenet-mlp, 2 workers
    python benchmarks/bench_breakdown_cost.py --model resnet --repeats 5

Torch times every step (a few ``perf_counter`` calls and one JSON line a step); MXNet
and Horovod drain the engine before one step in ten (``workloads.steps``), which costs
that step its overlap of compute with the previous step's communication.
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

ENGINES = ("mxnet", "torch", "torch-ddp", "horovod")
GOAL = 0.97


def rate(engine: str, args, breakdown: bool, out: Path) -> float:
    """Samples/s of the cell's workers at their steady rate."""
    cell = CellConfig(engine=engine, model=args.model,
                      layers=args.layers if args.model == "resnet" else None,
                      batch=args.batch, devices=args.devices, sync="sync",
                      max_samples=args.samples, dataset="synthetic")
    engine_ = get_engine(engine)
    cluster = LocalCluster(engine_.nodes_needed(cell))
    record = run_cell(cell, cluster, engine_, out, TrainOptions(val_samples=64,
                                                                breakdown=breakdown),
                      sweep_id="bench", timeout_s=900, monitor_interval_s=None)
    if record["status"] != "ok" or not record.get("steady_s_per_sample"):
        raise SystemExit(f"{engine} breakdown={breakdown}: {record['status']} "
                         f"{record.get('reason')}")
    return 1.0 / record["steady_s_per_sample"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--model", default="lenet-mlp")
    parser.add_argument("--layers", type=int, default=20)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--samples", type=int, default=12800,
                        help="training samples (the cell's --max-samples)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"{args.model} b{args.batch} d{args.devices} sync, {args.samples} samples, "
          f"{args.repeats} runs each way, alternating")
    print(f"{'engine':<10} {'off samples/s':>14} {'on samples/s':>13} {'on/off':>7}  goal")
    with tempfile.TemporaryDirectory(prefix="edgeprof-bench-") as tmp:
        for engine in args.engines.split(","):
            runs: dict[bool, list[float]] = {True: [], False: []}
            for i in range(args.repeats):
                for breakdown in (False, True) if i % 2 == 0 else (True, False):
                    out = Path(tmp) / f"{engine}-{breakdown}-{i}"
                    runs[breakdown].append(rate(engine, args, breakdown, out))
            off, on = statistics.median(runs[False]), statistics.median(runs[True])
            ratio = on / off
            print(f"{engine:<10} {off:>14.0f} {on:>13.0f} {ratio:>7.3f}  "
                  f"{'met' if ratio >= GOAL else 'NOT met'} (>= {GOAL})")


if __name__ == "__main__":
    main()
