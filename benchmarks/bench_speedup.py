"""Does time dilation keep the study's shape? One run, root.

``--speedup K`` lets each cell run with its nodes' CPU quotas and link rates multiplied
by the largest factor up to K that the host can give it (``profiles.dilation``; the
record's ``speedup``). If the emulation is faithful, a cell's time at speedup k is its
time at 1 divided by k. This trains the same small grid (LeNet-MLP and LeNet-CNN, batch
64, sync, 1 and 4 devices, on the study's calibrated profile) undilated and with
``--speedup K``, and prints for each cell the time per sample (first epoch) undilated
and dilated x its k (the board's time; target ratio 1), and for each model the
4-device/1-device ratio both ways (target quotient 1).

    sudo .venv/bin/python benchmarks/bench_speedup.py [--speedup 100] [--samples 5120]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("OMP_NUM_THREADS", "1")

from profiler.cell import CellConfig  # noqa: E402
from profiler.cluster import cluster_settings, emulated  # noqa: E402
from profiler.sweep.grid import validate  # noqa: E402
from profiler.sweep.sweep import SweepSettings, run_sweep  # noqa: E402

PROFILE = "pi3b-park2019"


def board_s_per_sample(record: dict) -> float:
    """First-epoch training time per sample without the first step (its one-off set-up
    does not dilate), in the board's time (x the cell's dilation)."""
    assert record["status"] == "ok", record.get("reason")
    return record["steady_s_per_sample"] * record["speedup"]


def run(speedup: float, samples: int, out: Path) -> dict[tuple[str, int], tuple[float, float]]:
    cells = [validate(CellConfig(model=model, layers=None, batch=64, devices=devices,
                                 max_samples=samples, dataset="synthetic"))
             for model in ("lenet-mlp", "lenet-cnn") for devices in (1, 4)]
    try:
        emulated.attach()
        emulated.down()
    except Exception:  # noqa: BLE001 - nothing up
        pass
    settings = SweepSettings(cells=cells, out_dir=out / f"x{speedup:g}",
                             cluster=cluster_settings("emulated", profile=PROFILE,
                                                      speedup=speedup),
                             interval_s=None, val_samples=64)
    records = run_sweep(settings, progress=False).records
    return {(r["model"], r["devices"]): (board_s_per_sample(r), r["speedup"])
            for r in records}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--speedup", type=float, default=100.0)
    parser.add_argument("--samples", type=int, default=5120)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-speedup-") as tmp:
        slow = run(1.0, args.samples, Path(tmp))
        fast = run(args.speedup, args.samples, Path(tmp))
    print(f"profile {PROFILE}, {args.samples} samples a cell, --speedup {args.speedup:g}")
    print(f"{'cell':<18} {'k':>5} {'ms/sample x1':>13} {'ms/sample xk':>13} {'ratio':>6}")
    for key in sorted(slow):
        (at1, _), (atk, k) = slow[key], fast[key]
        print(f"{key[0]:<10} d{key[1]:<6} {k:>5g} {at1 * 1e3:>13.2f} {atk * 1e3:>13.2f} "
              f"{atk / at1:>6.2f}")
    print(f"{'model':<18} {'4/1 undilated':>14} {'4/1 dilated':>12} {'quotient':>9}")
    for model in ("lenet-mlp", "lenet-cnn"):
        at1 = slow[(model, 4)][0] / slow[(model, 1)][0]
        atk = fast[(model, 4)][0] / fast[(model, 1)][0]
        print(f"{model:<18} {at1:>14.2f} {atk:>12.2f} {atk / at1:>9.2f}")


if __name__ == "__main__":
    main()
