"""What a node's CPU quota does to the CPU a training step costs, and how that drifts (issue 47).

An emulated node trains at its quota's share of a core: the kernel's CFS bandwidth
control gives it ``quota`` µs of CPU a ``period`` and freezes it for the rest
(``profiler.cluster.cgroups``: 1 ms a period, so 10.5 ms periods at 0.0949 cores, the
LeNet-MLP quota at speedup 2). If the step's CPU time were the same as unthrottled, the
node's pace would be the host's speed times the quota and nothing else. This benchmark
measures whether it is: in ``--rounds`` rounds one after the other (minutes apart), each
of ``--processes`` fresh processes trains ``--steps`` LeNet-MLP steps (batch 64, as Table
1) in one bare cgroup, for each variant:

- ``free``: no quota (the host's own speed, the reference);
- ``1 ms``: the quota as the emulated cluster sets it (1 ms of CPU a period);
- ``6 ms``: the same share in slices six times as long (6 ms every 6 periods);

with MXNet's shared-pool engine (``ThreadedEngine``, what pi3b-park2019 gives the LeNets)
and without engine threads (``NaiveEngine``); with ``--pin``, each variant again with the
process and its threads held to one CPU (``sched_setaffinity``, the host's last), which
the kernel otherwise may move to another CPU after each freeze, caches cold; and with
``--busy``, held there beside an idle-class busy loop on the same CPU, which takes only
what the process leaves (``SCHED_IDLE``) but keeps the CPU from idling through each
freeze (a VM's idle vCPU halts, and its core may clock down or serve another guest). It prints
each variant's CPU ms a step (per round: the median of its processes and their spread),
the inflation (÷ the free median of the same round), the spread of the round medians
across rounds, and the wall time over CPU time ÷ quota (1.00: the quota is enforced
exactly, and the pace is the step's CPU time).

    sudo .venv/bin/python benchmarks/bench_quota_pace.py            # 3 rounds, ~4 min
    sudo .venv/bin/python benchmarks/bench_quota_pace.py --rounds 2 --processes 3 \\
        --quota 0.0611 --out pace.json
    sudo .venv/bin/python benchmarks/bench_quota_pace.py --engines ThreadedEngine --pin \\
        --busy --slices 1

Run it on a quiet host: anything else running is a cause of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# A cgroup parent of its own (instance 9), beside any cluster the host runs.
os.environ.setdefault("EDGEPROF_CLUSTER_INSTANCE", "9")

WARM_STEPS = 15  # MXNet's first steps allocate and bind: left out
ENGINES = ("ThreadedEngine", "NaiveEngine")
SLICE_MS = {"1 ms": 1, "6 ms": 6}

CHILD = """
import json, os, sys, time
if {pin!r} is not None:  # before MXNet starts its threads, which inherit it
    os.sched_setaffinity(0, {{{pin!r}}})
sys.path.insert(0, {root!r})
import numpy as np
import mxnet as mx
from mxnet import autograd, gluon
from workloads import gluon_models, models
steps, warm = {steps}, {warm}
net = models.build("lenet-mlp", None, 10)
net.initialize(gluon_models.initializer(models.get("lenet-mlp")))
net.hybridize(static_alloc=True)
x = np.random.rand(64, *models.input_shape("lenet-mlp")).astype("float32")
y = np.random.randint(0, 10, 64).astype("float32")
if {join!r}:  # into the quota only now: MXNet's import takes 20 s at 0.1 cores
    with open({join!r}, "w") as procs:
        procs.write(str(os.getpid()))
trainer = gluon.Trainer(net.collect_params(), "sgd", {{"learning_rate": 0.01}}, kvstore="local")
loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
def step():
    with autograd.record():
        loss = loss_fn(net(mx.nd.array(x)), mx.nd.array(y))
    loss.backward()
    trainer.step(64)
    loss.mean().asscalar()
for _ in range(warm):
    step()
cpu0, wall0 = time.process_time(), time.perf_counter()
for _ in range(steps):
    step()
print(json.dumps({{"cpu_ms": (time.process_time() - cpu0) / steps * 1e3,
                  "wall_ms": (time.perf_counter() - wall0) / steps * 1e3}}))
"""


def _set_slices(group, quota_cores: float, slice_ms: int) -> None:
    """``quota_cores`` as ``slice_ms`` of CPU a period (the cluster's own: 1 ms)."""
    from profiler.cluster import cgroups

    quota_us, period_us = cgroups.cfs_quota_us(quota_cores)
    quota_us, period_us = quota_us * slice_ms, min(period_us * slice_ms,
                                                   cgroups.MAX_CFS_PERIOD_US)
    if group.version == 1:
        for name, value in (("cpu.cfs_quota_us", -1), ("cpu.cfs_period_us", period_us),
                            ("cpu.cfs_quota_us", quota_us)):
            (group.cpu_dir / name).write_text(str(value))
    else:
        (group.cpu_dir / "cpu.max").write_text(f"{quota_us} {period_us}")


BUSY_LOOP = """
import os
os.sched_setaffinity(0, {{{cpu}}})
os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
while True:
    pass
"""


def _busy_loop(cpu: int) -> subprocess.Popen:
    """An idle-class busy loop on ``cpu``: it runs only when nothing else there would."""
    return subprocess.Popen([sys.executable, "-c", BUSY_LOOP.format(cpu=cpu)])


def _train(group, engine: str, steps: int, pin: int | None = None) -> dict:
    """One fresh process, in ``group``'s CPU quota (None: none) from its first warm-up
    step on, on CPU ``pin`` alone when given: its CPU and wall ms a step."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MXNET_ENGINE_TYPE": engine}
    join = str(group.cpu_dir / "cgroup.procs") if group is not None else ""
    out = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT), steps=steps,
                                                             warm=WARM_STEPS, join=join,
                                                             pin=pin)],
                         env=env, capture_output=True, text=True, timeout=600, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _setting(variant: str) -> str:
    """A variant's engine and affinity: ``ThreadedEngine pinned 1 ms`` -> ``ThreadedEngine
    pinned``, whose ``free`` variant it is divided by."""
    return next(variant.removesuffix(f" {label}") for label in ("free", *SLICE_MS)
                if variant.endswith(f" {label}"))


def _spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values) if values else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quota", type=float, default=0.0949,
                        help="cores (pi3b-park2019's LeNet-MLP at speedup 2)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--engines", default=",".join(ENGINES),
                        help="MXNet engines to measure, comma-separated")
    parser.add_argument("--pin", action="store_true",
                        help="each variant also with the process held to one CPU")
    parser.add_argument("--busy", action="store_true",
                        help="each variant also pinned beside an idle-class busy loop")
    parser.add_argument("--slices", default=",".join(str(v) for v in SLICE_MS.values()),
                        help="ms of CPU a slice to measure (1: the cluster's)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    engines = args.engines.split(",")
    cpu = os.cpu_count() - 1
    # (name suffix, CPU to hold the process to, a busy loop beside it)
    settings = [("", None, False), *([(" pinned", cpu, False)] if args.pin else []),
                *([(" pinned busy", cpu, True)] if args.busy else [])]
    slices = {label: ms for label, ms in SLICE_MS.items()
              if str(ms) in args.slices.split(",")}
    if os.geteuid() != 0:
        sys.exit("bench_quota_pace: needs root (a cgroup of its own): run with sudo")
    from profiler.cluster import cgroups

    layout = cgroups.detect_layout()
    group = cgroups.create_node_cgroup(layout, "quota-pace", args.quota, 4096)
    started = time.monotonic()
    measured: dict[str, list[list[dict]]] = {}
    try:
        for _ in range(args.rounds):
            for engine, (suffix, pin, busy) in ((e, s) for e in engines for s in settings):
                name = engine + suffix
                loop = _busy_loop(pin) if busy else None
                try:
                    runs = [_train(None, engine, 2 * args.steps, pin)
                            for _ in range(args.processes)]
                    measured.setdefault(f"{name} free", []).append(runs)
                    for label, slice_ms in slices.items():
                        _set_slices(group, args.quota, slice_ms)
                        runs = [_train(group, engine, args.steps, pin)
                                for _ in range(args.processes)]
                        measured.setdefault(f"{name} {label}", []).append(runs)
                finally:
                    if loop is not None:
                        loop.kill()
                        loop.wait()
    finally:
        cgroups.remove_all(layout)
    print(f"LeNet-MLP b64, quota {args.quota} cores, {args.rounds} rounds x "
          f"{args.processes} processes, {time.monotonic() - started:.0f} s")
    print(f"   {'variant':<30} {'CPU ms a step, per round (spread)':<44} "
          f"{'x free':>14} {'rounds':>7} {'wall/(cpu/q)':>12}")
    summary = {}
    for name, rounds in measured.items():
        engine = _setting(name)
        medians = [statistics.median(r["cpu_ms"] for r in runs) for runs in rounds]
        frees = [statistics.median(r["cpu_ms"] for r in runs)
                 for runs in measured[f"{engine} free"]]
        inflation = [m / f for m, f in zip(medians, frees)]
        per_round = " ".join(f"{m:.2f}({_spread([r['cpu_ms'] for r in runs]):.0%})"
                             for m, runs in zip(medians, rounds))
        exact = [r["wall_ms"] / (r["cpu_ms"] / args.quota) for runs in rounds for r in runs] \
            if "free" not in name else []
        print(f"   {name:<30} {per_round:<44} "
              f"{min(inflation):>6.2f}-{max(inflation):<6.2f} {_spread(medians):>7.0%} "
              f"{(f'{min(exact):.2f}-{max(exact):.2f}' if exact else ''):>12}")
        summary[name] = {"cpu_ms_by_round": rounds, "median_cpu_ms": medians,
                         "x_free": inflation, "rounds_spread": _spread(medians)}
    if args.out:
        args.out.write_text(json.dumps({"quota_cores": args.quota, "variants": summary},
                                       indent=1))


if __name__ == "__main__":
    main()
