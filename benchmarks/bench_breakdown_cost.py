"""What timing every step costs: worker samples/s with the step breakdown on against off.

For each engine (MXNet ``dist_sync``, the torch parameter server, torch DDP and
Horovod: the study's parameter-server engines and the allreduce ones) the same cell
runs with ``--breakdown on`` and ``off``, alternating (off first in even rounds, on
first in odd ones), ``--repeats`` times each, on the local cluster (loopback: no root
needed), at ``--devices`` workers (1: each engine's one-device worker). Each run's rate
is the workers' rate over their epochs, epoch 1 without its first step
(``profiler.timeline.rate`` from the epochs alone: the same figure on both sides, where
the cell's ``robust_s_per_sample`` would come from the step lines when they exist). Each
side's median is printed with its spread (min-max), with the ratio of the medians and
the spread of the paired (same round) ratios. Goal: ratio of medians >= 0.97.

    python benchmarks/bench_breakdown_cost.py                       # lenet-mlp, 2 workers
    python benchmarks/bench_breakdown_cost.py --model resnet --repeats 5
    python benchmarks/bench_breakdown_cost.py --devices 1 --batch 64 --samples 12000

Torch times every step (a few ``perf_counter`` calls and one buffered line a step);
MXNet and Horovod drain the engine before one step in 100 (``workloads.steps``), which
costs that step its overlap of compute with the previous step's communication.
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
from profiler.sweep.events import read_cell_events  # noqa: E402
from profiler.sweep.runner import run_cell  # noqa: E402
from profiler.timeline.rate import robust_columns  # noqa: E402

ENGINES = ("mxnet", "torch", "torch-ddp", "horovod")
GOAL = 0.97


def rate(engine: str, args, breakdown: bool, out: Path) -> float:
    """Samples/s of the cell's workers over their epochs (the first step out)."""
    cell = CellConfig(engine=engine, model=args.model,
                      layers=args.layers if args.model == "resnet" else None,
                      batch=args.batch, devices=args.devices, sync="sync",
                      epochs=args.epochs, max_samples=args.samples, dataset="synthetic")
    engine_ = get_engine(engine)
    cluster = LocalCluster(engine_.nodes_needed(cell))
    record = run_cell(cell, cluster, engine_, out, TrainOptions(val_samples=64,
                                                                breakdown=breakdown),
                      sweep_id="bench", timeout_s=900, monitor_interval_s=None)
    if record["status"] != "ok":
        raise SystemExit(f"{engine} breakdown={breakdown}: {record['status']} "
                         f"{record.get('reason')}")
    events = read_cell_events(out / "events")
    start0 = next(e for e in events.by_rank[0] if e.get("event") == "start")
    per_sample = robust_columns({}, events.epochs_by_rank(), start0,
                                every_step_timed=False)["robust_s_per_sample"]
    if not per_sample:
        raise SystemExit(f"{engine} breakdown={breakdown}: no epoch to measure")
    return 1.0 / per_sample


def spread(values: list[float]) -> str:
    """A median with its min-max range."""
    return f"{statistics.median(values):.0f} [{min(values):.0f}-{max(values):.0f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--model", default="lenet-mlp")
    parser.add_argument("--layers", type=int, default=20)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3,
                        help="epochs a run (three or more: a disturbed one is left out)")
    parser.add_argument("--samples", type=int, default=12800,
                        help="training samples (the cell's --max-samples)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"{args.model} b{args.batch} d{args.devices} sync, {args.samples} samples, "
          f"{args.epochs} epochs, {args.repeats} runs each way, alternating")
    print(f"{'engine':<10} {'off samples/s [min-max]':>26} {'on samples/s [min-max]':>26} "
          f"{'on/off':>7} {'paired':>13}  goal")
    with tempfile.TemporaryDirectory(prefix="edgeprof-bench-") as tmp:
        for engine in args.engines.split(","):
            runs: dict[bool, list[float]] = {True: [], False: []}
            for i in range(args.repeats):
                for breakdown in (False, True) if i % 2 == 0 else (True, False):
                    out = Path(tmp) / f"{engine}-{breakdown}-{i}"
                    runs[breakdown].append(rate(engine, args, breakdown, out))
            off, on = statistics.median(runs[False]), statistics.median(runs[True])
            paired = [a / b for a, b in zip(runs[True], runs[False])]
            ratio = on / off
            print(f"{engine:<10} {spread(runs[False]):>26} {spread(runs[True]):>26} "
                  f"{ratio:>7.3f} {min(paired):>6.3f}-{max(paired):.3f}  "
                  f"{'met' if ratio >= GOAL else 'NOT met'} (>= {GOAL})", flush=True)


if __name__ == "__main__":
    main()
