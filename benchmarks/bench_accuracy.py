"""Validation accuracy on real images: devices, sync against async, MXNet against Horovod.

Reproduces the accuracy table of issue 9 on the current defaults (per-model learning
rate, momentum 0.9, weight decay 1e-4): LeNet MLP and CNN on Fashion-MNIST (Debian's
``dataset-fashion-mnist``), 20,000 training samples, batch 64 per worker, 2 epochs, for
1, 2 and 4 devices, MXNet ``dist_sync`` and ``dist_async`` and Horovod allreduce, on the
local cluster (real processes on this machine; accuracy does not depend on the cluster).

It also runs one device at each *global* batch (devices x batch): N sync workers apply
exactly that update (``workloads.optim``), so their accuracy should match it within the
run-to-run spread, which ``--spread-seeds K`` measures (the one-device cells again with
K seeds; the tolerance the parity tests use comes from it, see docs/workloads.md).
``--async-repeats K`` runs the async cells K more times with the same seed: the order of
pushes differs from run to run, so async accuracy is a distribution, not one number.

    python benchmarks/bench_accuracy.py                          # the table, ~4 min
    python benchmarks/bench_accuracy.py --spread-seeds 5         # plus the spread
    python benchmarks/bench_accuracy.py --dataset mnist-5k --samples 4000 --epochs 3

Prints one table; accuracies from one run each (seed 42 unless ``--seed``), then every
cell that diverged or did not end ``ok``, with its reason.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("OMP_NUM_THREADS", "1")

from profiler.cell import CellConfig  # noqa: E402
from profiler.sweep.grid import validate  # noqa: E402
from profiler.sweep.sweep import SweepSettings, run_sweep  # noqa: E402


def grid(models: list[str], devices: list[int], batch: int, samples: int, epochs: int,
         dataset: str, lr: float | None) -> list[CellConfig]:
    """The table's cells, then one device at each global batch (parity references)."""
    cells = []
    for model in models:
        common = dict(model=model, layers=None, epochs=epochs, max_samples=samples,
                      dataset=dataset, lr=lr)
        cells.append(CellConfig(batch=batch, devices=1, **common))
        for n in (d for d in devices if d > 1):
            cells.append(CellConfig(batch=batch, devices=n, sync="sync", **common))
            cells.append(CellConfig(batch=batch, devices=n, sync="async", **common))
            cells.append(CellConfig(engine="horovod", batch=batch, devices=n, **common))
        for n in (d for d in devices if d > 1):
            cells.append(CellConfig(batch=batch * n, devices=1, **common))
    return [validate(c) for c in cells]


def run(cells: list[CellConfig], seed: int, out: Path) -> dict[str, dict]:
    settings = SweepSettings(cells=cells, out_dir=out, interval_s=None,
                             seed=seed, val_samples=None)
    outcome = run_sweep(settings, progress=sys.stderr.isatty())
    return {r["cell_id"]: r for r in outcome.records}


def _acc(record: dict | None) -> str:
    """The accuracy, ``!`` when the cell diverged, ``?`` when it did not end ``ok``."""
    if not record or record.get("val_accuracy") is None:
        return f"{record.get('status', '?') if record else '-':>7}"
    mark = ("?" if record.get("status") != "ok" else
            "!" if record.get("diverged") else " ")
    return f"{record['val_accuracy']:6.3f}{mark}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="lenet-mlp,lenet-cnn")
    parser.add_argument("--devices", default="1,2,4")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--samples", type=int, default=20000)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--dataset", default="fashion-mnist")
    parser.add_argument("--lr", type=float, default=None, help="default: each model's")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--spread-seeds", type=int, default=0,
                        help="also run the one-device cells with this many seeds")
    parser.add_argument("--async-repeats", type=int, default=0,
                        help="also run the async cells this many more times (same seed)")
    args = parser.parse_args()
    models = args.models.split(",")
    devices = [int(d) for d in args.devices.split(",")]
    cells = grid(models, devices, args.batch, args.samples, args.epochs, args.dataset,
                 args.lr)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-accuracy-") as tmp:
        records = run(cells, args.seed, Path(tmp) / "main")
        spread: dict[str, list[float]] = {}
        for seed in range(1, args.spread_seeds + 1):
            singles = [c for c in cells if c.devices == 1]
            for cell_id, rec in run(singles, seed, Path(tmp) / f"seed-{seed}").items():
                if rec.get("val_accuracy") is not None:
                    spread.setdefault(cell_id, []).append(rec["val_accuracy"])
        repeats: dict[str, list[dict]] = {}
        for repeat in range(1, args.async_repeats + 1):
            asyncs = [c for c in cells if c.sync == "async"]
            for cell_id, rec in run(asyncs, args.seed,
                                    Path(tmp) / f"async-{repeat}").items():
                repeats.setdefault(cell_id, []).append(rec)
    by_key = {(c.model, c.engine, c.devices, c.sync, c.batch): records.get(c.cell_id)
              for c in cells}

    print(f"{args.dataset}, {args.samples} samples, batch {args.batch}/worker, "
          f"{args.epochs} epochs, seed {args.seed}; '!' = diverged, '?' = not ok")
    print(f"{'model':10} {'devices':>7} {'lr':>6} {'mxnet sync':>11} {'mxnet async':>12} "
          f"{'horovod':>8}   {'1 device @ global batch':>24}")
    for model in models:
        lr = next(c.lr for c in cells if c.model == model)
        for n in devices:
            if n == 1:
                acc = _acc(by_key[(model, 'mxnet', 1, 'sync', args.batch)])
                print(f"{model:10} {n:7d} {lr:6g} {acc:>11}")
                continue
            sync = by_key[(model, "mxnet", n, "sync", args.batch)]
            asyn = by_key[(model, "mxnet", n, "async", args.batch)]
            hvd = by_key[(model, "horovod", n, "sync", args.batch)]
            ref = by_key[(model, "mxnet", 1, "sync", args.batch * n)]
            print(f"{model:10} {n:7d} {lr:6g} {_acc(sync):>11} {_acc(asyn):>12} {_acc(hvd):>8}"
                  f"   {_acc(ref):>17} (b{args.batch * n})")
    print("\nparity (accuracy differences, sync N workers against 1 device at the global "
          "batch):")
    for model in models:
        for n in (d for d in devices if d > 1):
            ref = by_key[(model, "mxnet", 1, "sync", args.batch * n)]
            sync = by_key[(model, "mxnet", n, "sync", args.batch)]
            hvd = by_key[(model, "horovod", n, "sync", args.batch)]
            values = [r.get("val_accuracy") if r else None for r in (ref, sync, hvd)]
            if None in values:
                print(f"  {model} N={n}: incomplete")
                continue
            r, s, h = values
            print(f"  {model} N={n}: mxnet-1dev {s - r:+.3f}  horovod-1dev {h - r:+.3f}  "
                  f"mxnet-horovod {s - h:+.3f}")
    if spread:
        print(f"\nrun-to-run spread of one device over {args.spread_seeds} seeds:")
        for cell in (c for c in cells if c.devices == 1):
            values = spread.get(cell.cell_id, [])
            if len(values) > 1:
                print(f"  {cell.model} b{cell.batch}: mean {statistics.mean(values):.3f} "
                      f"sd {statistics.stdev(values):.3f} range "
                      f"{max(values) - min(values):.3f} ({len(values)} seeds)")
    if repeats:
        print(f"\nasync, {args.async_repeats} more runs each (same seed; '!' = diverged):")
        for cell in (c for c in cells if c.sync == "async"):
            runs = [records.get(cell.cell_id), *repeats.get(cell.cell_id, [])]
            values = " ".join(_acc(r).strip() for r in runs)
            print(f"  {cell.model} N={cell.devices}: {values}")
    flagged = [(c, r) for c in cells if (r := records.get(c.cell_id))
               and (r.get("diverged") or r.get("status") != "ok")]
    if flagged:
        print("\ndiverged or not ok:")
    for cell, record in flagged:
        print(f"  {cell.label}: {record.get('status')}, {record.get('reason')}; training "
              f"loss per epoch {record.get('train_loss_per_epoch')}")
    print(f"\n{len(cells)} cells in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
