"""Horovod's allreduce over Gloo against Open MPI on the emulated cluster: latency and bus
bandwidth per tensor size, against the ring's floor on the nodes' link.

For each link (node profile: ``pi3b``, 100 Mbit; ``pi4``, 1 Gbit), node count (2, 4),
backend (``--horovod-ops gloo`` / ``mpi``) and tensor size (4 KB to 64 MB, x4): one
process per node allreduces a float32 tensor of that size (``hvd.allreduce_``, sum)
``--repeats`` times after one warm-up, each repeat started together (a tiny allreduce
first) and timed on every rank; a repeat's time is the slowest rank's (an allreduce is
done when it is done everywhere). Printed per row: the mean latency with its 95%
confidence interval (Student's t over the repeats), the bus bandwidth
``busbw = size / t x 2(N-1)/N`` (NCCL-tests' definition: what each link carried per
second), and the ring's floor ``2(N-1)/N x size / link rate`` with ``t / floor``.

The processes are launched exactly as the engine launches a cell
(``profiler.engines.horovod`` plan, the cluster's ``start``, ``Cluster.entry`` for
``mpirun``'s rsh agent): same quotas (each node's profile quota for LeNet-MLP, the
rank joining it after its imports), same namespaces and links. Only the program the
ranks run differs (this file, ``--rank``).

    sudo python benchmarks/bench_allreduce.py                      # pi3b and pi4, 2 and 4
    sudo python benchmarks/bench_allreduce.py --profiles pi3b --nodes 2 --max-size 16M

Takes a few minutes (64 MB at 100 Mbit is 5 s per repeat at N = 2). The emulated
cluster it brings up is taken down at the end; one that was up is rebuilt for another
profile only when idle (``ensure_cluster``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("OMP_NUM_THREADS", "1")

SIZES = [4 << 10 << (2 * i) for i in range(8)]  # 4 KB, 16 KB, ... 64 MB
# Student's t at 97.5% by degrees of freedom (a 95% two-sided interval).
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
         9: 2.262, 10: 2.228, 15: 2.131, 20: 2.086, 30: 2.042}
RUN_TIMEOUT_S = 1800.0


def size_text(nbytes: int) -> str:
    return f"{nbytes >> 20} MB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KB"


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def ring_floor_s(nbytes: int, nodes: int, link_mbit: float) -> float:
    """The ring allreduce's floor: each node sends 2(N-1)/N x size over its link."""
    return 2.0 * (nodes - 1) / nodes * nbytes / (link_mbit * 1e6 / 8)


def interval(samples: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% confidence interval."""
    mean = statistics.fmean(samples)
    if len(samples) < 2:
        return mean, math.nan
    df = len(samples) - 1
    t = T_975.get(df) or T_975[max(k for k in T_975 if k <= df)]
    return mean, t * statistics.stdev(samples) / math.sqrt(len(samples))


def repeats_for(nbytes: int, repeats: int) -> int:
    """Fewer repeats of the big tensors (seconds each at 100 Mbit), never under 3."""
    return repeats if nbytes <= 1 << 20 else max(3, repeats // 2)


# --- on each node: one rank ------------------------------------------------------------

def rank_main(out: Path, sizes: list[int], repeats: int) -> None:
    from workloads import hvd as worker_hvd
    from workloads.node_limits import join_cpu_limit

    rank, size = worker_hvd.init()
    import horovod.mxnet as hvd
    import mxnet as mx

    join_cpu_limit()  # the node's CPU quota from here on, as a training worker's
    tick = mx.nd.zeros((1,))
    rows = []
    for nbytes in sizes:
        x = mx.nd.ones((nbytes // 4,), dtype="float32")
        times = []
        for i in range(repeats_for(nbytes, repeats) + 1):  # the first is a warm-up
            hvd.allreduce_(tick, op=hvd.Sum, name="tick")
            tick.wait_to_read()
            t0 = time.perf_counter()
            hvd.allreduce_(x, op=hvd.Sum, name=f"x{nbytes}")
            x.wait_to_read()
            if i:
                times.append(time.perf_counter() - t0)
        slowest = mx.nd.array(times)
        hvd.allreduce_(slowest, op=hvd.Max, name=f"t{nbytes}")
        rows.append({"bytes": nbytes, "times_s": slowest.asnumpy().tolist()})
    if rank == 0:
        out.write_text(json.dumps({"nodes": size, "rows": rows}))
    worker_hvd.shutdown()
    sys.stdout.flush()
    os._exit(0)  # as workloads.train's MXNet workers: skip MXNet's teardown


# --- on the controller -----------------------------------------------------------------

def run_backend(cluster, ops: str, nodes: int, sizes: list[int], repeats: int,
                work: Path) -> dict:
    """Start one rank per node the way the engine starts a cell, wait, reap."""
    from profiler.cluster.base import kill_groups
    from profiler.engines.base import TrainOptions
    from profiler.engines.horovod import HorovodEngine
    from profiler.sweep.grid import CellConfig, validate
    from profiler.sweep.launch import write_entries
    from workloads.events import NODE_ENV
    from workloads.mpi import NODE_ENTRIES_ENV

    cell = validate(CellConfig(engine="horovod", model="lenet-mlp", layers=None,
                               devices=nodes, batch=32,
                               engine_params=(("horovod_ops", ops),) if ops == "mpi" else ()))
    cluster.prepare(cell, nodes)
    run_dir = work / f"{ops}-{nodes}-{int(time.time() * 1000)}"
    out = run_dir / "result.json"
    rank_argv = [sys.executable, str(Path(__file__).resolve()), "--rank", str(out),
                 "--sizes", ",".join(map(str, sizes)), "--repeats", str(repeats)]
    specs = HorovodEngine().plan(cell, cluster.nodes()[:nodes], run_dir, TrainOptions())
    procs = []
    try:
        for spec in specs:
            argv = spec.argv
            if spec.role == "worker":
                argv = rank_argv
            elif spec.launches_on:  # mpirun: the ranks' program follows the last "--"
                argv = argv[:len(argv) - argv[::-1].index("--")] + rank_argv
            env = {**spec.env, NODE_ENV: spec.node.name}
            if spec.launches_on:
                env[NODE_ENTRIES_ENV] = str(write_entries(cluster, spec, run_dir))
            procs.append((spec, cluster.start(spec.node, argv, env,
                                              run_dir / "logs" / f"{spec.name}.log",
                                              role=spec.role)))
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while any(p.poll() is None for s, p in procs if s.decisive):
            failed = [s.name for s, p in procs if p.poll() not in (None, 0)]
            if failed or time.monotonic() > deadline:
                sys.exit(f"{ops} N={nodes}: {', '.join(failed) or 'timed out'} "
                         f"(logs in {run_dir / 'logs'})")
            time.sleep(0.2)
    finally:
        kill_groups([p for _, p in procs])
    if not out.exists():
        sys.exit(f"{ops} N={nodes}: no result (logs in {run_dir / 'logs'})")
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rank", help=argparse.SUPPRESS)
    parser.add_argument("--sizes", help=argparse.SUPPRESS)
    parser.add_argument("--profiles", default="pi3b,pi4")
    parser.add_argument("--nodes", default="2,4")
    parser.add_argument("--ops", default="gloo,mpi")
    parser.add_argument("--max-size", default="64M")
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    if args.rank:
        rank_main(Path(args.rank), [int(s) for s in args.sizes.split(",")], args.repeats)
        return

    from profiler.cluster import emulated
    from profiler.cluster.profiles import load_catalog

    sizes = [s for s in SIZES if s <= parse_size(args.max_size)]
    counts = [int(n) for n in args.nodes.split(",")]
    catalog = load_catalog().profiles
    rows = []
    brought_up = False
    print(f"{'link':>9} {'N':>2} {'ops':>5} {'size':>6} {'mean ms':>10} {'±95% ms':>9} "
          f"{'busbw MB/s':>10} {'floor ms':>9} {'t/floor':>7}")
    with tempfile.TemporaryDirectory(prefix="bench-allreduce-") as tmp:
        try:
            for profile in args.profiles.split(","):
                cluster, created = emulated.ensure_cluster(max(counts), profile)
                brought_up = brought_up or created
                link_mbit = catalog[profile].link_mbit
                for nodes in counts:
                    for ops in args.ops.split(","):
                        result = run_backend(cluster, ops, nodes, sizes, args.repeats,
                                             Path(tmp))
                        for row in result["rows"]:
                            mean, half = interval(row["times_s"])
                            floor = ring_floor_s(row["bytes"], nodes, link_mbit)
                            busbw = row["bytes"] / mean * 2 * (nodes - 1) / nodes / 1e6
                            rows.append({"profile": profile, "link_mbit": link_mbit,
                                         "nodes": nodes, "ops": ops, **row,
                                         "mean_s": mean, "ci95_s": half,
                                         "busbw_mb_s": busbw, "floor_s": floor})
                            print(f"{link_mbit:>5g}Mbit {nodes:>2} {ops:>5} "
                                  f"{size_text(row['bytes']):>6} {mean * 1e3:>10.2f} "
                                  f"{half * 1e3:>9.2f} {busbw:>10.2f} {floor * 1e3:>9.2f} "
                                  f"{mean / floor:>7.2f}", flush=True)
        finally:
            if brought_up:
                emulated.down()
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
