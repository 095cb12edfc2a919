"""The run-to-run spread of a study ratio against the steps its cells train (issue 34).

``edgeprof study park2019`` judges a time ratio (N devices against one) "within" or
"outside" its band from the cells' time per sample. At a small ``--scale`` a worker
trains a few steps and the ratio moves with the host's noise. This runs, through the
real sweep, pairs of the study's cells (one device and N devices, batch 64 LeNet,
batch 32 ResNet, set up as the study's scripts ran them: ``grid.METHOD["scripts"]``)
at several scales, each pair ``--repeats`` times, interleaved (every cell once, then
every cell again: the host's drift hits all scales alike), and reads each repeat's
ratio with the study's own reader (``report.ratios.per_sample_s``: the robust, else
steady, time per sample, in the board's time).

It prints one row per (model, scale): steps per worker (of the N-device cell, the
fewer), the ratio's median, its relative spread ``(max - min) / median``, its
coefficient of variation (sample standard deviation / mean), and the band (park2019's
``TABLE``, 1.25: ``[median / 1.25, median x 1.25]``).

**The rule.** A row's spread is *well inside the band* when its coefficient of
variation is at most a tenth of the band's width around its median: ``cv <= (band - 1
/ band) / 10`` (0.045 for 1.25): the median of three repeats then moves by about 3%
(0.67 cv) from run to run, so a row 5% or more inside or outside its band keeps its
verdict. (The range, ``max - min``, is printed too, but the range of five draws is
itself a noisy number: it is not the rule.) The fewest steps per worker for a model is
the smallest steps of a row that holds the rule while every row of that model with
more steps holds it too; the study's minimum is the largest of the models' (None: no scale run
was enough; run larger scales).

    sudo .venv/bin/python benchmarks/bench_ratio_spread.py --out spread.json
        # emulated pi3b-park2019, devices 4, scales 0.005,0.01,0.02, 5 repeats

On the emulated cluster run it on a profile that holds on this host (``sudo edgeprof
study park2019 --profile-check recalibrate`` re-calibrates it first): a quota off by a
factor moves the ratio's median, not its spread. Before it runs it prints the study's
estimate of its time (``study/estimate.py``).
    .venv/bin/python benchmarks/bench_ratio_spread.py --cluster local --models lenet-mlp \\
        --scales 0.005,0.01 --repeats 2 --devices 2          # a minute: does it work

Writes the table's rows, every repeat's ratio and the cells' statuses to ``--out``
(JSON) beside the table; ``--keep DIR`` keeps the sweep itself (``DIR/sweep``: each
cell's record, with its training time and per-step breakdown, which is where the
causes in docs/study.md were read).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("OMP_NUM_THREADS", "1")

from profiler.cluster import cluster_settings  # noqa: E402
from profiler.cluster.profiles import load_catalog  # noqa: E402
from profiler.report.ratios import per_sample_s, steps_per_worker  # noqa: E402
from profiler.study import STUDIES, estimate  # noqa: E402
from profiler.study.park2019 import grid as g  # noqa: E402
from profiler.study.park2019.ratios import TABLE  # noqa: E402
from profiler.study.plan import repeated  # noqa: E402
from profiler.sweep.sweep import SweepSettings, run_sweep  # noqa: E402

PROFILE = "pi3b-park2019"
# model -> (layers, batch): LeNet-MLP as Table 1; ResNet-20 at the study's batch 32.
MODELS = {"lenet-mlp": (None, 64), "lenet-example": (None, 64), "resnet": (20, 32)}
VAL_SAMPLES = 64  # the time ratio does not read validation: keep it short
TENTH = 10  # "well inside": cv within a tenth of the band's width (module doc)


def cells_at(model: str, devices: int, scale: float, engine: str) -> list:
    """The study's one- and N-device cells of ``model`` at ``scale`` (its floor of
    ``grid.MIN_STEPS`` steps per worker included)."""
    layers, batch = MODELS[model]
    how = g.METHOD["scripts"]
    found = [g.Experiment("bench", model, layers, batch, (1, devices))]
    samples = g.train_samples(found, scale, how)
    return g.cells(found, samples, {model: "synthetic"}, engine, how)


def spread_row(model: str, scale: float, pairs: list[tuple[dict, dict]],
               band: float = TABLE) -> dict:
    """One table row from the (N-device, one-device) records of each repeat."""
    ratios, times = [], []
    for many, one in pairs:
        a, b = per_sample_s(many), per_sample_s(one)
        if a is not None and b:
            ratios.append(a / b)
            # Each side's time per sample (board's time) and dilation: which one moves.
            times.append({"many_s_per_sample": a, "one_s_per_sample": b,
                          "speedups": [many.get("speedup"), one.get("speedup")]})
    steps = [s for many, _ in pairs if (s := steps_per_worker(many)) is not None]
    row = {"model": model, "scale": scale, "steps_per_worker": min(steps) if steps else None,
           "ratios": ratios, "times": times, "repeats": len(pairs), "band": band,
           "median": None, "spread": None, "cv": None, "well_inside": None}
    if len(ratios) >= 2:
        median = statistics.median(ratios)
        row.update(median=median, spread=(max(ratios) - min(ratios)) / median,
                   cv=statistics.stdev(ratios) / statistics.mean(ratios))
        row["well_inside"] = row["cv"] <= (band - 1 / band) / TENTH
    return row


def fewest_steps(rows: list[dict]) -> int | float | None:
    """The module doc's rule over one model's rows: the smallest steps per worker from
    which every row holds it (None: the largest does not)."""
    known = sorted((r for r in rows if r["well_inside"] is not None),
                   key=lambda r: r["steps_per_worker"])
    fewest = None
    for r in reversed(known):
        if not r["well_inside"]:
            break
        fewest = r["steps_per_worker"]
    return fewest


def _refuse(problem: str) -> None:
    """Bad input: one line, exit status 2, nothing run."""
    print(f"bench_ratio_spread: {problem}", file=sys.stderr)
    sys.exit(2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", default="emulated", choices=("emulated", "local"))
    parser.add_argument("--profile", default=PROFILE, help="emulated cluster's profile")
    parser.add_argument("--speedup", type=float, default=1.0,
                        help="emulated cluster: time dilation up to this factor")
    parser.add_argument("--models", default="lenet-mlp,resnet",
                        help=f"of {', '.join(MODELS)} (ResNet: ResNet-20 x 32)")
    parser.add_argument("--devices", type=int, default=4, help="N of the N / 1 ratio")
    parser.add_argument("--scales", default="0.005,0.01,0.02")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--engine", default="mxnet")
    parser.add_argument("--out", type=Path, default=None, help="JSON results")
    parser.add_argument("--keep", type=Path, default=None, metavar="DIR",
                        help="run the sweep in DIR/sweep and keep it (records, logs, "
                             "traces: the cells' own times), instead of a temporary folder")
    args = parser.parse_args()
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in MODELS]
    scales = [float(s) for s in args.scales.split(",")]
    if unknown or args.devices < 2 or args.repeats < 2:
        _refuse(f"models from {', '.join(MODELS)}, --devices 2 or more, --repeats 2 or "
                "more")
    if args.keep and (args.keep / "sweep").exists():
        _refuse(f"{args.keep / 'sweep'} already exists: give --keep a folder without a "
                "sweep in it")
    # (model, scale) -> {devices: cell}; two scales may share a cell (both at the floor).
    pair_cells = {(m, sc): {c.devices: c for c in cells_at(m, args.devices, sc, args.engine)}
                  for m in models for sc in scales}
    cells = list({c.cell_id: c for pair in pair_cells.values()
                  for c in pair.values()}.values())
    if args.cluster == "emulated":
        cluster = cluster_settings("emulated", profile=args.profile, speedup=args.speedup)
    else:
        cluster = cluster_settings("local")
    runs = repeated(cells, args.repeats)
    study = STUDIES["park2019"]
    expected_s = estimate.grid_s(study, runs, cluster.speed, cluster.node_profile,
                                 load_catalog(), VAL_SAMPLES, cluster.max_speedup)
    print(f"{len(runs)} cells on the {cluster.label}, estimated {estimate.shown(expected_s)}",
          file=sys.stderr, flush=True)
    started = time.monotonic()
    folder = (contextlib.nullcontext(str(args.keep)) if args.keep
              else tempfile.TemporaryDirectory(prefix="bench-ratio-spread-"))
    with folder as tmp:
        settings = SweepSettings(cells=runs, cluster=cluster,
                                 out_dir=Path(tmp) / "sweep", interval_s=None,
                                 val_samples=VAL_SAMPLES)
        outcome = run_sweep(settings, progress=sys.stderr.isatty())
    elapsed_s = time.monotonic() - started
    records = {r["cell_id"]: r for r in outcome.records}
    rows = []
    for (model, scale), pair in pair_cells.items():
        found = [(records.get(replace(pair[args.devices], repeat=k).cell_id),
                  records.get(replace(pair[1], repeat=k).cell_id))
                 for k in range(args.repeats)]
        rows.append(spread_row(model, scale, [(a, b) for a, b in found
                                              if _ok(a) and _ok(b)]))
    fewest = {m: fewest_steps([r for r in rows if r["model"] == m]) for m in models}
    known = [v for v in fewest.values() if v is not None]
    minimum = max(known) if len(known) == len(fewest) else None

    where = cluster.label + (f" (up to speedup {args.speedup:g})"
                             if args.cluster == "emulated" and args.speedup != 1 else "")
    print(f"{where}; {args.devices} / 1 devices, {args.repeats} repeats interleaved, "
          f"{len(settings.cells)} cells in {elapsed_s:.0f} s")
    print(f"{'model':<14} {'scale':>6} {'steps/worker':>12} {'median':>7} "
          f"{'(max-min)/med':>13} {'cv':>6} {'band':>5} {'well inside':>11}")
    for r in rows:
        if r["median"] is None:
            print(f"{r['model']:<14} {r['scale']:>6g} {r['steps_per_worker'] or '-':>12} "
                  f"fewer than 2 repeats finished ({len(r['ratios'])})")
            continue
        print(f"{r['model']:<14} {r['scale']:>6g} {r['steps_per_worker']:>12g} "
              f"{r['median']:>7.3f} {r['spread']:>13.3f} {r['cv']:>6.3f} {r['band']:>5g} "
              f"{'yes' if r['well_inside'] else 'no':>11}")
    limit = (TABLE - 1 / TABLE) / TENTH
    print(f"well inside: cv <= {limit:.3f} (a tenth of the band's width)")
    for model, steps in fewest.items():
        print(f"fewest steps per worker, {model}: "
              + (f"{steps:g}" if steps is not None else "none of the scales run"))
    print("the study's minimum (the largest of the models'): "
          + (f"{minimum:g}" if minimum is not None else "not found: run larger scales"))
    not_ok = [r for r in outcome.records if r.get("status") != "ok"]
    for r in not_ok:
        print(f"  not ok: {r['cell_id']}: {r.get('status')}, {r.get('reason')}")
    if args.out:
        args.out.write_text(json.dumps({
            "cluster": where, "devices": args.devices, "repeats": args.repeats,
            "scales": scales, "models": models, "elapsed_s": elapsed_s,
            "rule": f"cv <= {limit:.4f}", "rows": rows,
            "fewest_steps": fewest, "min_steps": minimum,
            "cells": {r["cell_id"]: r.get("status") for r in outcome.records}},
            indent=1) + "\n")
        print(f"results: {args.out}")


def _ok(record: dict | None) -> bool:
    return bool(record) and record.get("status") == "ok"


if __name__ == "__main__":
    main()
