"""The study's LeNet rows as the study ran them: replicated workers on the calibrated Pi 3B.

Park, Lee & Kim ran MXNet 0.9.5's ``train_mnist.py``, which gives every worker the
whole training set each epoch (docs/study.md, "What the study ran"). Read that way, each
of their LeNet steps is one global step of N workers, and the step time minus the
one-device step time is what moving N workers' gradients through the parameter
server's 100 Mbit link cost: ``N x 4 bytes x parameters x 2 (push and pull) / link``
for one server, half of it per direction on a full-duplex link.

This trains LeNet-MLP and MXNet's example LeNet (``lenet-example``), batch 64, sync,
``--data-partition replicate``, on 1, 2, 4 and 10 devices of the emulated
``pi3b-park2019`` cluster (no dilation: the cable's own rate), with the server on a
master node and with a server beside every worker (``--placement master,colocated``),
in one run, and prints per cell:

- the time per step (steady: the first step's set-up left out) beside the study's
  (epoch time / 937.5 steps of 64);
- the N-device / one-device step time, ours and the study's (Tables 1-2);
- the rate the busiest node's link carried during training (the larger direction, from
  the metrics agent's counters: the server's node with ``master``, the mean node with
  ``colocated``), and the rate the study's numbers imply: ``N x gradient bits`` over
  the step time minus the one-device step time, once per direction.

Run it on a profile that holds on this host (``sudo edgeprof study park2019
--profile-check recalibrate`` re-calibrates it first, or ``edgeprof cluster
calibrate``): the one-device step time is every ratio's denominator.

    sudo .venv/bin/python benchmarks/bench_park2019_lenet.py [--devices 1,2,4,10]
        [--placements master,colocated] [--steps 12]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("OMP_NUM_THREADS", "1")

from profiler.metrics.summary import summarize_cell  # noqa: E402
from profiler.cell import CellConfig  # noqa: E402
from profiler.cluster import cluster_settings, emulated  # noqa: E402
from profiler.study.park2019.reference import load_reference  # noqa: E402
from profiler.sweep.events import read_cell_events  # noqa: E402
from profiler.sweep.grid import validate  # noqa: E402
from profiler.sweep.sweep import SweepSettings, run_sweep  # noqa: E402
from workloads import models  # noqa: E402

PROFILE = "pi3b-park2019"
BATCH = 64
STUDY_STEPS = 60000 / BATCH  # steps of one epoch on every worker (replicated)
TABLES = {"lenet-mlp": "table1_lenet_mlp", "lenet-example": "table2_lenet_cnn"}


def study_step_s(model: str, devices: int) -> float | None:
    rows = load_reference()[TABLES[model]]
    if devices not in rows["devices"]:
        return None
    return rows["elapsed_s"][rows["devices"].index(devices)] / STUDY_STEPS


def implied_mbit(model: str, devices: int, step_s: float | None, one_s: float | None
                 ) -> float | None:
    """The link rate at which N workers' gradients take the step's extra time."""
    if devices == 1 or not step_s or not one_s or step_s <= one_s:
        return None
    bits = devices * models.parameter_count(model) * 32
    return bits / (step_s - one_s) / 1e6


def link_mbit(record: dict, sweep_dir: Path, placement: str) -> float | None:
    """The busiest direction of the server node's link during training, Mbit/s."""
    if record["devices"] == 1:
        return None
    attempt = sweep_dir / "cells" / record["cell_id"] / f"attempt-{record['attempt']}"
    window = read_cell_events(attempt / "events").train_window()
    if not window:
        return None
    if placement == "master":
        nodes = ["n0"]
    else:
        nodes = [f"n{i}" for i in range(record["devices"])]
    summary = summarize_cell(attempt, nodes, *window)
    kb = max(summary.get("net_sent_kb_per_s") or 0, summary.get("net_recv_kb_per_s") or 0)
    return kb * 1024 * 8 / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", default="1,2,4,10")
    parser.add_argument("--placements", default="master,colocated")
    parser.add_argument("--models", default="lenet-mlp,lenet-example")
    parser.add_argument("--steps", type=int, default=12,
                        help="steps per worker (each worker trains steps x 64 samples)")
    args = parser.parse_args()
    devices = [int(d) for d in args.devices.split(",")]
    placements = args.placements.split(",")
    names = args.models.split(",")
    cells = []
    for model in names:
        for n in devices:
            for placement in (placements if n > 1 else ["master"]):
                cells.append(validate(CellConfig(
                    model=model, layers=None, batch=BATCH, devices=n, sync="sync",
                    lr=0.05, max_samples=args.steps * BATCH, dataset="synthetic",
                    placement=placement, data_partition="replicate")))
    try:
        emulated.attach()
        emulated.down()
    except Exception:  # noqa: BLE001 - nothing up
        pass
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-park2019-") as tmp:
        out = Path(tmp) / "sweep"
        settings = SweepSettings(cells=cells, out_dir=out,
                                 cluster=cluster_settings("emulated", profile=PROFILE),
                                 interval_s=0.5, val_samples=64)
        outcome = run_sweep(settings, progress=False)
        rows = []
        for r in outcome.records:
            if r["status"] != "ok":
                rows.append((r, None, None))
                continue
            step_s = r["steady_s_per_sample"] * BATCH  # replicated: per worker's sample
            rows.append((r, step_s, link_mbit(r, out, r["placement"])))
    one = {r["model"]: s for r, s, _ in rows if r["devices"] == 1}
    print(f"profile {PROFILE}, batch {BATCH}, sync, replicated, {args.steps} steps a worker; "
          f"{time.monotonic() - started:.0f} s")
    print(f"{'model':<14} {'N':>3} {'placement':<10} {'s/step':>7} {'study':>7} "
          f"{'N/1':>6} {'study':>6} {'link Mbit/s':>12} {'implied':>8} {'study':>7}")
    for r, step_s, mbit in rows:
        model, n = r["model"], r["devices"]
        if step_s is None:
            print(f"{model:<14} {n:>3} {r['placement']:<10} {r['status']}: {r.get('reason')}")
            continue
        study = study_step_s(model, n)
        study_one = study_step_s(model, 1)
        ratio = step_s / one[model] if one.get(model) else None
        study_ratio = study / study_one if study and study_one else None
        ours_implied = implied_mbit(model, n, step_s, one.get(model))
        study_implied = implied_mbit(model, n, study, study_one)
        print(f"{model:<14} {n:>3} {r['placement'] if n > 1 else '-':<10} {step_s:>7.3f} "
              f"{_f(study, 3):>7} {_f(ratio, 2):>6} {_f(study_ratio, 2):>6} "
              f"{_f(mbit, 1):>12} {_f(ours_implied, 1):>8} {_f(study_implied, 1):>7}")


def _f(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


if __name__ == "__main__":
    main()
