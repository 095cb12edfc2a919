"""The exchange on any host: a node's quota against its link's frames (issue 47).

A Pi 3B's CPU quota is calibrated on compute, so the faster the host, the smaller it is
(this host: LeNet-MLP 0.0611 cores; a host 1.8 x as fast: 0.0405). The host's kernel
does each packet's work inline in the sending node's system calls, charged to that
quota. This runs, at each of ``--quotas`` (cores: the quotas hosts of different speeds
calibrate a Pi 3B to) and each of ``--frames`` (the emulated links' MTU,
``cluster.netns.LINK_MTU``; 1500 was the links' frame before this benchmark):

- the profile check's two-node probe (``profiler.calibrate.exchange``): one LeNet-MLP
  step's bytes each way, measured against what the link's rate predicts;
- the study's LeNet-MLP cell (batch 64, MXNet, a server beside every worker) at
  ``--devices`` devices, ``--repeats`` times: its comm part a step against the link's
  prediction for MXNet's placement of the arrays (``bench_study_causes.wire_ms``).

A quota under the board's trains slower than the board, so only the exchange's part is
compared across quotas: the link's share of a step should not move with the quota.

    sudo .venv/bin/python benchmarks/bench_link_frames.py
    sudo .venv/bin/python benchmarks/bench_link_frames.py --quotas 0.0611,0.02 --frames 9000
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("OMP_NUM_THREADS", "1")

from bench_study_causes import (EXCHANGE_EPOCHS, EXCHANGE_STEPS, VAL_SAMPLES,  # noqa: E402
                                array_sizes, wire_ms)

from profiler.calibrate.check import with_quota  # noqa: E402
from profiler.calibrate.exchange import check_exchanges  # noqa: E402
from profiler.cluster import netns, profiled_provider  # noqa: E402
from profiler.cluster.profiles import load_catalog  # noqa: E402
from profiler.study.park2019 import grid as g  # noqa: E402
from profiler.study.plan import repeated  # noqa: E402
from profiler.sweep.sweep import SweepSettings, run_sweep  # noqa: E402

MODEL = "lenet-mlp"


def one_setting(profile, quota: float, frames: int, devices: int, repeats: int,
                work: Path) -> dict:
    """The probe's ratio and the cell's comm parts at one quota and frame size."""
    netns.LINK_MTU = frames  # read when a node's link is made
    # A name of its own per setting: a cluster is built afresh with these links.
    mine = replace(with_quota(profile, MODEL, 1, quota),
                   name=f"{profile.name}-q{quota:g}-f{frames}")
    [probe] = check_exchanges(mine, [(MODEL, None, MODEL, 1.0)], mode="recalibrate",
                              work=work / "probe")
    how = g.METHOD["scripts"]
    found = [g.Experiment("bench", MODEL, None, 64, (devices,))]
    samples = {(MODEL, None, 64, devices): EXCHANGE_STEPS * 64}
    cells = [replace(c, epochs=EXCHANGE_EPOCHS, max_speedup=1.0) for c in
             g.cells(found, samples, {MODEL: "synthetic"}, "mxnet", how)]
    settings = SweepSettings(cells=repeated(cells, repeats),
                             cluster=profiled_provider()(profile=mine, speedup=1.0),
                             out_dir=work / "cells", interval_s=None,
                             val_samples=VAL_SAMPLES)
    records = [r for r in run_sweep(settings, progress=sys.stderr.isatty()).records
               if r.get("status") == "ok" and r.get("comm_ms_mean") is not None]
    return {"quota": quota, "frames": frames, "probe_ratio": probe.ratio,
            "comm_ms": [r["comm_ms_mean"] for r in records],
            "expected_ms": wire_ms(array_sizes(MODEL), devices, profile.link_mbit)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="pi3b-park2019")
    parser.add_argument("--quotas", default="0.0611,0.03,0.02",
                        help="LeNet-MLP's quota in cores, one setting each")
    parser.add_argument("--frames", default="1500,9000", help="the links' MTU, bytes")
    parser.add_argument("--devices", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    profile = load_catalog().profiles[args.profile]
    quotas = [float(q) for q in args.quotas.split(",")]
    frames = [int(f) for f in args.frames.split(",")]
    started = time.monotonic()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-link-frames-") as tmp:
        for size in frames:
            for quota in quotas:
                rows.append(one_setting(profile, quota, size, args.devices, args.repeats,
                                        Path(tmp) / f"q{quota:g}-f{size}"))
                print(f"  done: quota {quota:g}, frames {size} "
                      f"(load {os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)
    print(f"{args.profile}, {MODEL} b64, {args.devices} devices, {args.repeats} repeats, "
          f"host cores {len(os.sched_getaffinity(0))}, {time.monotonic() - started:.0f} s, "
          f"load {os.getloadavg()[0]:.1f}")
    print(f"{'frames':>6} {'quota':>7} {'probe x link':>12} {'comm ms (repeats)':>20} "
          f"{'link ms':>8} {'comm x link':>11}")
    for row in rows:
        comm = row["comm_ms"]
        median = statistics.median(comm) if comm else None
        print(f"{row['frames']:>6} {row['quota']:>7.4f} {row['probe_ratio']:>12.2f} "
              f"{', '.join(f'{c:.0f}' for c in comm) or 'no cell ok':>20} "
              f"{row['expected_ms']:>8.0f} "
              f"{(median / row['expected_ms']) if median else float('nan'):>11.2f}")


if __name__ == "__main__":
    main()
