"""How long ``edgeprof report`` takes for a sweep of 50 cells x 10 nodes, one run.

The sweep folder is built from real spools: one real 2-device LeNet-CNN cell (local
cluster, metrics every 0.5 s) is run, then its record and its nodes' spools are copied
into 50 cells (devices 1-10 x sync/async x LeNet MLP/CNN, records edited to carry those
configurations) of 10 nodes each (each node a copy of one of the real node spools).
Prints the time ``build_report`` takes and its ratio to the 10 s target, the HTML size
and the PNGs written. ``--keep DIR`` leaves the built sweep in DIR, and ``--sweep DIR``
times the report of such a folder again without running the real cell (for a profiler).

    .venv/bin/python benchmarks/bench_report.py [--cells 50] [--nodes 10] [--keep DIR]
    .venv/bin/python benchmarks/bench_report.py --sweep DIR
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from itertools import product
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("OMP_NUM_THREADS", "1")

from profiler.cell import CellConfig  # noqa: E402
from profiler.report.build import build_report  # noqa: E402
from profiler.sweep.sweep import SweepSettings, run_sweep  # noqa: E402

TARGET_S = 10.0  # issue 28: a report of 50 cells x 10 nodes in at most 10 s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=50)
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--keep", type=Path, default=None,
                        help="build the sweep in this (new) folder and leave it there")
    parser.add_argument("--sweep", type=Path, default=None,
                        help="time the report of a folder left by --keep, build nothing")
    args = parser.parse_args()
    if args.sweep is not None:
        _time_report(args.sweep, "an existing sweep folder")
        return
    work = args.keep or Path(tempfile.mkdtemp(prefix="bench-report-"))
    try:
        said = _build_sweep(work, args.cells, args.nodes)
        _time_report(work / "big", said)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


def _build_sweep(work: Path, cells: int, nodes: int) -> str:
    """The sweep of ``cells`` x ``nodes`` in ``work``/big; what it is, in words."""
    source = run_sweep(SweepSettings(
        cells=[CellConfig(model="lenet-cnn", layers=None, devices=2, batch=32, epochs=12,
                          max_samples=4000, dataset="synthetic")],
        out_dir=work / "source", interval_s=0.5), progress=False)
    real = source.records[0]
    assert real["status"] == "ok", real["reason"]
    real_nodes = sorted((work / "source" / "cells" / real["cell_id"] / "attempt-1" /
                         "metrics").iterdir())
    span_s = real["reaped_at"] - real["launched_at"]

    big = work / "big"
    (big / "cells").mkdir(parents=True)
    shutil.copy(work / "source" / "sweep.json", big / "sweep.json")
    configs = list(product(("lenet-mlp", "lenet-cnn"), ("sync", "async"), range(1, 11),
                           (32, 64)))[:cells]
    with open(big / "results.jsonl", "w") as records:
        for model, sync, devices, batch in configs:
            cell = CellConfig(model=model, layers=None, devices=devices, sync=sync,
                              batch=batch, epochs=12, max_samples=4000, dataset="synthetic")
            record = {**real, "model": model, "sync": sync, "devices": devices,
                      "batch": batch, "cell_id": cell.cell_id}
            records.write(json.dumps(record) + "\n")
            metrics = big / "cells" / cell.cell_id / "attempt-1" / "metrics"
            for index in range(nodes):
                shutil.copytree(real_nodes[index % len(real_nodes)], metrics / f"n{index}")
    return (f"{len(configs)} cells x {nodes} nodes, real spools of {span_s:.0f} s each "
            f"({len(real_nodes)} real nodes copied)")


def _time_report(sweep: Path, said: str) -> None:
    started = time.monotonic()
    page = build_report(sweep)
    took_s = time.monotonic() - started
    pngs = list((sweep / "report-figures").glob("*.png"))
    lines = sum(len(p.read_bytes().splitlines()) for p in sweep.glob("cells/*/*/metrics/*/*.lp"))
    print(f"{said}; {lines:,} spool lines")
    print(f"report: {took_s:.1f} s = {took_s / TARGET_S:.2f} x the {TARGET_S:g} s target; "
          f"HTML {page.stat().st_size / 2**20:.1f} MB, {len(pngs)} PNGs "
          f"({sum(p.stat().st_size for p in pngs) / 2**20:.1f} MB)")


if __name__ == "__main__":
    main()
