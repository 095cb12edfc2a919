"""Why a study's time ratio moves from host to host: one run, its causes side by side (issue 47).

``edgeprof study park2019`` judges N-device / one-device time ratios on emulated Pi 3Bs:
nodes whose CPU quota was calibrated on this host to the board's training rate. The same
command gave other ratios on a host 1.8 x faster than the profile's, dilated or not. The
candidate causes, each measured here in one run:

1. **The denominator's pace.** Every N / 1 ratio divides by the one-device cell, which
   trains at whatever rate its quota buys on this host at that moment: part A measures
   that pace in ``--builds`` separately built one-node clusters (as the profile check
   measures it, a fresh cluster each time) and ``--repeats`` times within one sweep (as
   the study's repeats run), and prints both spreads against the board's rate.
2. **The CFS quota's stalls.** A node of a few hundredths of a core gets 1 ms of CPU a
   period of 1 / quota ms (``cluster.cgroups.cfs_period_us``: 18 ms at 0.054 cores)
   and is frozen for the rest; a message that reaches a frozen node waits. Part B reads
   every node's ``cpu.stat`` (periods, throttled periods) beside each cell, and gives
   each cell's step in the board's time split into compute, exchange (comm), waiting for
   the other workers and data, with the share of periods the nodes were throttled.
3. **The network stack outside the cgroups.** Part of the kernel's per-packet work
   (softirq) is charged to no node (what a send does inline is charged to the sending
   node's quota: docs/study.md): part B prints the host's softirq CPU-seconds per step.
4. **Dilation.** Part B runs at each of ``--speedups``: a cause that grows with k shows
   as a ratio that moves with k while the denominator stays.
5. **A busy host.** Part B runs beside each of ``--hogs`` busy processes (a core each, at
   the host's default priority, as another user's job would be): a cause that grows with
   the host's load shows as a ratio that moves with the hogs at the same quota.
6. **The exchange against the link.** Part D (``--exchange``, instead of A and B): the
   profile check's two-node probe (``profiler.calibrate.exchange``) of each model, 3
   times, then the study's cells of LeNet-MLP and the example LeNet at ``--exchange``'s
   device counts, ``--repeats`` times at speedup 1 over ``EXCHANGE_EPOCHS`` epochs (MXNet
   times one step an epoch): each step's comm part against what the link predicts for
   MXNet's KVStore, every array under a million elements on one server
   (``key * 9973 % servers``), so the busiest node's link carries that server's arrays
   from and to every other worker plus its own worker's pushes elsewhere (``wire_ms``).

    sudo .venv/bin/python benchmarks/bench_study_causes.py --out causes.json
        # pi3b-park2019, LeNet-MLP b64 as Table 1 ran it, devices 1,5,9, speedups 1,2
    sudo .venv/bin/python benchmarks/bench_study_causes.py --model lenet-example  # Table 2
    sudo .venv/bin/python benchmarks/bench_study_causes.py --model resnet --devices 1,4 \
        --speedups 1,4,16 --builds 1
    sudo .venv/bin/python benchmarks/bench_study_causes.py --devices 1,3,5 --speedups 1 \
        --hogs 0,2  # the same quota, quiet and beside two busy processes
    sudo .venv/bin/python benchmarks/bench_study_causes.py --exchange 2,5 --repeats 3
        # part D only: LeNet-MLP and the example LeNet, 2 and 5 devices

Run it on a quiet host (the test suite beside it is a third cause). It prints what it
measured; docs/study.md ("Why ratios moved between hosts") reads it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("OMP_NUM_THREADS", "1")

from profiler.calibrate import Workload, _Measurer  # noqa: E402
from profiler.calibrate.check import CHECK_STEPS, CHECK_TRAIN_S  # noqa: E402
from profiler.cluster import cluster_settings  # noqa: E402
from profiler.cluster.profiles import load_catalog  # noqa: E402
from profiler.report.ratios import per_sample_s  # noqa: E402
from profiler.study.park2019 import grid as g  # noqa: E402
from profiler.study.plan import repeated  # noqa: E402
from profiler.sweep.sweep import SweepSettings, run_sweep  # noqa: E402

CPU_ROOT = Path("/sys/fs/cgroup/cpu")  # cgroup v1's cpu controller (this host's)
VAL_SAMPLES = 64
# model -> (layers, batch): Table 1's LeNet-MLP, Table 2's example LeNet, the study's
# ResNet at batch 32 (its shallowest depth here, 20: the slowest cells are ResNet's).
MODELS = {"lenet-mlp": (None, 64), "lenet-example": (None, 64), "resnet": (20, 32)}
POLL_S = 0.25
EXCHANGE_MODELS = ("lenet-mlp", "lenet-example")
# Epochs of a part D cell, each of EXCHANGE_STEPS steps: MXNet times one step an epoch
# (workloads/steps.py), so a cell gives this many timed steps per worker.
EXCHANGE_EPOCHS = 4
EXCHANGE_STEPS = 5


class Poller(threading.Thread):
    """Every node cgroup's ``cpu.stat`` and the host's softirq time, every ``POLL_S``."""

    def __init__(self):
        super().__init__(daemon=True)
        self.samples: list[tuple[float, dict, float]] = []
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            self.samples.append((time.time(), _node_stats(), _softirq_s()))
            time.sleep(POLL_S)

    def between(self, start: float, end: float) -> tuple[dict, float] | None:
        """Per node (periods, throttled periods) and the softirq seconds of [start, end]."""
        inside = [s for s in self.samples if start <= s[0] <= end]
        if len(inside) < 2:
            return None
        (_, first, irq0), (_, last, irq1) = inside[0], inside[-1]
        nodes = {}
        for node, stat in last.items():
            before = first.get(node)
            if before and stat["nr_periods"] >= before["nr_periods"]:
                nodes[node] = (stat["nr_periods"] - before["nr_periods"],
                               stat["nr_throttled"] - before["nr_throttled"])
        return nodes, irq1 - irq0


def _node_stats() -> dict:
    found = {}
    for stat in CPU_ROOT.glob("edgeprof*/*/cpu.stat"):
        try:
            found[stat.parent.name] = {k: int(v) for k, v in
                                       (line.split() for line in stat.read_text().splitlines())}
        except (OSError, ValueError):
            pass  # a node being removed
    return found


def _softirq_s() -> float:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()
    return int(fields[7]) / os.sysconf("SC_CLK_TCK")  # cpu user nice system idle iowait irq softirq


def pace_spread(profile, model: str, builds: int, work: Path) -> dict:
    """Part A: the one-device rate at the profile's quota in ``builds`` fresh one-node
    clusters, measured over 6 steps and at the profile check's length."""
    rate = profile.board_rates[model]
    workload = Workload(rate.model, rate.layers, rate.batch)
    quota = profile.cpu_cores_for(model, 1)
    out = {}
    for label, steps, train_s in (("6 steps", 6, 0.0),
                                  ("the check's", CHECK_STEPS, CHECK_TRAIN_S)):
        measure = _Measurer(work / label.split()[-1], profile, steps=steps, train_s=train_s)
        ratios = [measure(workload, quota, rate.samples_per_s).samples_per_s
                  / rate.samples_per_s for _ in range(builds)]
        out[label] = ratios
    return {"quota_cores": quota, "ratios": out}


def board_ms(record: dict, name: str) -> float | None:
    value = record.get(name)
    return None if value is None else float(value) * float(record.get("speedup") or 1)


def breakdown(records: list[dict], poller: Poller, devices: list[int]) -> list[dict]:
    """Part B's rows: per device count, medians over repeats, in the board's time."""
    rows = []
    ok = [r for r in records if r.get("status") == "ok"]
    one = [per_sample_s(r) for r in ok if r["devices"] == 1]
    one_s = statistics.median([s for s in one if s]) if any(one) else None
    for n in devices:
        mine = [r for r in ok if r["devices"] == n]
        if not mine:
            continue
        row = {"devices": n, "speedup": mine[0].get("speedup")}
        for name in ("steady_step_ms", "compute_ms_mean", "comm_ms_mean", "wait_ms_mean",
                     "data_ms_mean"):
            values = [v for r in mine if (v := board_ms(r, name)) is not None]
            row[name] = statistics.median(values) if values else None
        ratios = [s / one_s for r in mine if (s := per_sample_s(r)) and one_s]
        row["ratio"] = statistics.median(ratios) if ratios else None
        throttled, irq_per_step = [], []
        for r in mine:
            seen = poller.between(r["launched_at"], r["reaped_at"])
            if not seen:
                continue
            nodes, irq_s = seen
            periods = sum(p for p, _ in nodes.values())
            throttled.append(sum(t for _, t in nodes.values()) / periods if periods else 0)
            steps = (r.get("train_s") or 0) * 1000 / (r.get("steady_step_ms") or 1e9)
            if steps:
                irq_per_step.append(irq_s * 1000 / steps)
        row["throttled_share"] = statistics.median(throttled) if throttled else None
        row["softirq_ms_per_step"] = statistics.median(irq_per_step) if irq_per_step else None
        rows.append(row)
    return rows


@contextlib.contextmanager
def busy(processes: int):
    """``processes`` busy loops beside the block, at the host's default priority."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(processes)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def run_breakdowns(profile_name: str, model: str, devices: list[int], speedups: list[float],
                   repeats: int, scale: float, work: Path, hogs: int = 0) -> dict:
    how = g.METHOD["scripts"]
    layers, batch = MODELS[model]
    found = [g.Experiment("bench", model, layers, batch, tuple(devices))]
    cells = g.cells(found, g.train_samples(found, scale, how), {model: "synthetic"},
                    "mxnet", how)
    out = {}
    for k in speedups:
        poller = Poller()
        poller.start()
        cluster = cluster_settings("emulated", profile=profile_name, speedup=k)
        # Every cell at k (the study caps a ratio's cells at one dilation: study/dilate.py).
        runs = repeated([replace(c, max_speedup=k) for c in cells], repeats)
        settings = SweepSettings(cells=runs, cluster=cluster,
                                 out_dir=work / f"h{hogs}k{k:g}",
                                 interval_s=None, val_samples=VAL_SAMPLES)
        with busy(hogs):
            records = run_sweep(settings, progress=sys.stderr.isatty()).records
        poller.stop.set()
        poller.join()
        out[k] = breakdown(records, poller, devices)
    return out


def array_sizes(model: str) -> list[int]:
    """The model's trainable arrays (elements) in the order the KVStore keys them."""
    import mxnet as mx

    from workloads import gluon_models, models

    net = models.build(model, None, 10)
    net.initialize(gluon_models.initializer(models.get(model)))
    net(mx.nd.zeros((1, *models.input_shape(model)))).wait_to_read()
    return [p.data().size for p in net.collect_params().values() if p.grad_req != "null"]


def wire_ms(sizes: list[int], nodes: int, link_mbit: float) -> float:
    """A sync step's time on the busiest link (push, then pull) with a server beside
    every worker: MXNet's placement of each array (module doc, 6)."""
    bound = 1_000_000  # MXNET_KVSTORE_BIGARRAY_BOUND's default
    on = [0.0] * nodes  # bytes each server holds
    for key, size in enumerate(sizes):
        if size < bound:
            on[key * 9973 % nodes] += 4 * size
        else:
            on = [b + 4 * size / nodes for b in on]
    total = sum(on)
    # One phase: node j takes in every other worker's push of its arrays and sends out
    # its own worker's pushes of the others'; the pull is the mirror image.
    busiest = max(max((nodes - 1) * held, total - held) for held in on)
    return 2 * busiest * 8 / (link_mbit * 1e6) * 1000


def exchange_table(profile_name: str, counts: list[int], repeats: int, work: Path) -> dict:
    """Part D: the probe's checks and the cells' comm against the link's prediction."""
    from profiler.calibrate.exchange import check_exchanges

    profile = load_catalog().profiles[profile_name]
    probes = {m: [] for m in EXCHANGE_MODELS}
    for attempt in range(3):
        for check in check_exchanges(profile, [(m, None, m, 1.0) for m in EXCHANGE_MODELS],
                                     mode="recalibrate", work=work / f"probe{attempt}"):
            probes[check.model].append(check.as_record())
    how = g.METHOD["scripts"]
    cluster = cluster_settings("emulated", profile=profile_name, speedup=1.0)
    rows = []
    for model in EXCHANGE_MODELS:
        sizes = array_sizes(model)
        found = [g.Experiment("bench", model, None, 64, tuple(counts))]
        samples = {(model, None, 64, n): EXCHANGE_STEPS * 64 for n in counts}
        cells = [replace(c, epochs=EXCHANGE_EPOCHS, max_speedup=1.0) for c in
                 g.cells(found, samples, {model: "synthetic"}, "mxnet", how)]
        settings = SweepSettings(cells=repeated(cells, repeats), cluster=cluster,
                                 out_dir=work / f"x-{model}", interval_s=None,
                                 val_samples=VAL_SAMPLES)
        records = [r for r in run_sweep(settings, progress=sys.stderr.isatty()).records
                   if r.get("status") == "ok"]
        message_ms = statistics.median(p["per_message_ms"] for p in probes[model])
        for n in counts:
            mine = [r for r in records if r["devices"] == n]
            comm = [r["comm_ms_mean"] for r in mine if r.get("comm_ms_mean") is not None]
            wait = [r["wait_ms_mean"] for r in mine if r.get("wait_ms_mean") is not None]
            # Every array is pushed and pulled as a message of its own.
            expected = wire_ms(sizes, n, profile.link_mbit) + 2 * len(sizes) * message_ms
            rows.append({"model": model, "devices": n, "expected_ms": expected,
                         "comm_ms": comm, "wait_ms": wait})
    return {"probes": probes, "cells": rows}


def print_exchange(table: dict) -> None:
    print("D. the exchange per step against the link (board ms, speedup 1)")
    print("   the profile check's two-node probe, 3 runs: measured / (wire + per-message)")
    for model, checks in table["probes"].items():
        print(f"   {model:<14} " + ", ".join(
            f"{c['measured_ms']:.0f} / {c['expected_ms']:.0f} ({c['ratio']:.2f} x, rounds "
            f"spread {c['spread']:.2f})" for c in checks))
    print(f"   {'model':<14} {'N':>3} {'expected':>8} {'comm (repeats)':>24} {'median':>6} "
          f"{'x exp':>6} {'spread':>6} {'wait':>6}")
    for row in table["cells"]:
        comm = row["comm_ms"]
        if not comm:
            print(f"   {row['model']:<14} {row['devices']:>3} no cell ok")
            continue
        median = statistics.median(comm)
        print(f"   {row['model']:<14} {row['devices']:>3} {row['expected_ms']:>8.0f} "
              f"{', '.join(f'{c:.0f}' for c in comm):>24} {median:>6.0f} "
              f"{median / row['expected_ms']:>6.2f} {(max(comm) - min(comm)) / median:>6.2f} "
              f"{statistics.median(row['wait_ms'] or [0]):>6.0f}")


def _fmt(value, spec: str = ".0f") -> str:
    return "-" if value is None else format(value, spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="pi3b-park2019")
    parser.add_argument("--model", default="lenet-mlp", choices=tuple(MODELS),
                        help="Table 1's LeNet-MLP, Table 2's example LeNet (batch 64) or "
                             "ResNet-20 x 32")
    parser.add_argument("--devices", default="1,5,9")
    parser.add_argument("--speedups", default="1,2")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--builds", type=int, default=3,
                        help="part A: fresh one-node clusters measured")
    parser.add_argument("--scale", type=float, default=0.02)
    parser.add_argument("--hogs", default="0",
                        help="part B beside each of these numbers of busy processes")
    parser.add_argument("--exchange", default="",
                        help="part D only, at these device counts (2,5): the exchange "
                             "against the link")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    devices = sorted({int(d) for d in args.devices.split(",")} | {1})
    speedups = [float(k) for k in args.speedups.split(",")]
    hog_counts = [int(h) for h in args.hogs.split(",")]
    catalog = load_catalog()
    if args.profile not in catalog.profiles or args.model not in \
            catalog.profiles[args.profile].board_rates:
        print(f"bench_study_causes: {args.profile} has no {args.model} board rate: give a "
              "calibrated profile (pi3b-park2019)", file=sys.stderr)
        sys.exit(2)
    if not CPU_ROOT.is_dir():
        print("bench_study_causes: needs cgroup v1's cpu controller at /sys/fs/cgroup/cpu",
              file=sys.stderr)
        sys.exit(2)
    profile = catalog.profiles[args.profile]
    started = time.monotonic()
    if args.exchange:
        with tempfile.TemporaryDirectory(prefix="bench-study-causes-") as tmp:
            table = exchange_table(args.profile, [int(n) for n in args.exchange.split(",")],
                                   args.repeats, Path(tmp))
        print(f"{args.profile}, host cores {len(os.sched_getaffinity(0))}, "
              f"{time.monotonic() - started:.0f} s")
        print_exchange(table)
        if args.out:
            args.out.write_text(json.dumps(table, indent=1) + "\n")
        return
    with tempfile.TemporaryDirectory(prefix="bench-study-causes-") as tmp:
        pace = pace_spread(profile, args.model, args.builds, Path(tmp) / "pace")
        rows = {hogs: run_breakdowns(args.profile, args.model, devices, speedups,
                                     args.repeats, args.scale, Path(tmp) / "sweeps", hogs)
                for hogs in hog_counts}
    cores = len(os.sched_getaffinity(0))
    print(f"{args.profile}, {args.model} {MODELS[args.model]}, host cores {cores}, "
          f"{time.monotonic() - started:.0f} s")
    print(f"A. one-device pace / board's, quota {pace['quota_cores']:.4f} cores, "
          f"{args.builds} fresh clusters each:")
    for label, ratios in pace["ratios"].items():
        spread = (max(ratios) - min(ratios)) / statistics.median(ratios)
        print(f"   {label:<16} " + " ".join(f"{r:.2f}" for r in ratios)
              + f"   spread (max-min)/median {spread:.2f}")
    print("B. per step, board ms (medians over repeats); ratio = N / 1 time per sample")
    print(f"   {'hogs':>4} {'k':>3} {'N':>3} {'step':>6} {'compute':>8} {'comm':>6} {'wait':>6} "
          f"{'data':>6} {'ratio':>6} {'throttled':>9} {'softirq ms/step':>15}")
    for hogs, by_k in rows.items():
        for k, table in by_k.items():
            for r in table:
                print(f"   {hogs:>4} {k:>3g} {r['devices']:>3} {_fmt(r['steady_step_ms']):>6} "
                      f"{_fmt(r['compute_ms_mean']):>8} {_fmt(r['comm_ms_mean']):>6} "
                      f"{_fmt(r['wait_ms_mean']):>6} {_fmt(r['data_ms_mean']):>6} "
                      f"{_fmt(r['ratio'], '.2f'):>6} {_fmt(r['throttled_share'], '.2f'):>9} "
                      f"{_fmt(r['softirq_ms_per_step'], '.1f'):>15}")
    if args.out:
        breakdowns = {f"hogs={hogs}": {f"k={k:g}": table for k, table in by_k.items()}
                      for hogs, by_k in rows.items()}
        args.out.write_text(json.dumps({"pace": pace, "breakdown": breakdowns},
                                       indent=1) + "\n")


if __name__ == "__main__":
    main()
