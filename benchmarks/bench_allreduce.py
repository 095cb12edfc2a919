"""Allreduce over Horovod's Gloo, Horovod's Open MPI and torch.distributed's Gloo on the
emulated cluster: latency and bus bandwidth per tensor size, against the ring's floor on
the nodes' link; and (``--end-to-end``) the same question for whole training cells.

For each link (node profile: ``pi3b``, 100 Mbit; ``pi4``, 1 Gbit), node count (2, 4, 8),
backend (``gloo``: ``--horovod-ops gloo``; ``mpi``: ``--horovod-ops mpi``; ``torch``:
``torch.distributed`` with its Gloo backend, as ``--engine torch-ddp`` runs it) and tensor
size (4 KB to 64 MB, x4): one process per node allreduces a float32 tensor of that size
(sum) ``--repeats`` times after one warm-up, each repeat started together (a tiny
allreduce first) and timed on every rank; a repeat's time is the slowest rank's (an
allreduce is done when it is done everywhere). Printed per row: the mean latency with its 95%
confidence interval (Student's t over the repeats), the bus bandwidth
``busbw = size / t x 2(N-1)/N`` (NCCL-tests' definition: what each link carried per
second), and the ring's floor ``2(N-1)/N x size / link rate`` with ``t / floor``.

The processes are launched exactly as the engines launch a cell
(``profiler.engines.horovod`` / ``profiler.engines.pytorch`` plans, the cluster's
``start``, ``Cluster.entry`` for ``mpirun``'s rsh agent): same quotas (each node's
profile quota for LeNet-MLP, the rank joining it after its imports), same namespaces
and links. Only the program the ranks run differs (this file, ``--rank``).

    sudo python benchmarks/bench_allreduce.py                 # pi3b and pi4; 2, 4, 8
    sudo python benchmarks/bench_allreduce.py --profiles pi3b --nodes 2 --max-size 16M
    sudo python benchmarks/bench_allreduce.py --ops gloo,torch --sizes 4M --repeats 3
    sudo python benchmarks/bench_allreduce.py --end-to-end --models lenet-mlp,resnet-20 \\
        --nodes 2,4 --profiles pi3b

The whole grid takes over an hour on 2 cores (64 MB at 100 Mbit is 5 to 9 s per repeat
and backend). ``--end-to-end`` runs ``edgeprof sweep --cluster emulated --engine horovod
--horovod-ops gloo,mpi`` per profile and prints samples/s side by side with MPI / Gloo.
The emulated cluster it brings up is taken down at the end; one that was up is rebuilt
for another profile only when idle (``ensure_cluster``).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import statistics
import subprocess
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
OPS = ("gloo", "mpi", "torch")  # Horovod's Gloo, Horovod's MPI, torch.distributed's Gloo
OPS_LABEL = {"gloo": "hvd-gloo", "mpi": "hvd-mpi", "torch": "torch-gloo"}


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

def torch_rank_main(out: Path, sizes: list[int], repeats: int) -> None:
    """As ``rank_main`` with torch.distributed's Gloo (``MASTER_ADDR``... from the plan)."""
    import torch
    import torch.distributed as dist
    from workloads.node_limits import join_cpu_limit

    dist.init_process_group("gloo")
    join_cpu_limit()
    tick = torch.zeros(1)
    rows = []
    for nbytes in sizes:
        x = torch.ones(nbytes // 4, dtype=torch.float32)
        times = []
        for i in range(repeats_for(nbytes, repeats) + 1):  # the first is a warm-up
            dist.all_reduce(tick)
            t0 = time.perf_counter()
            dist.all_reduce(x)  # synchronous: done here when done on this rank
            if i:
                times.append(time.perf_counter() - t0)
        slowest = torch.tensor(times, dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        rows.append({"bytes": nbytes, "times_s": slowest.tolist()})
    if dist.get_rank() == 0:
        out.write_text(json.dumps({"nodes": dist.get_world_size(), "rows": rows}))
    dist.destroy_process_group()


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
                work: Path, program: list[str] | None = None) -> dict:
    """Start one rank per node the way the engine starts a cell, wait, reap.

    ``program``: another rank program (argv; ``--out FILE`` is appended: rank 0 writes its
    JSON there), launched as this file's ranks are (``bench_ddp_mpi_hook.py``)."""
    from profiler.cluster.base import kill_groups
    from profiler.engines.base import TrainOptions
    from profiler.engines.horovod import HorovodEngine
    from profiler.engines.pytorch import TorchDDPEngine
    from profiler.sweep.grid import CellConfig, validate
    from profiler.sweep.launch import write_entries
    from workloads.events import NODE_ENV
    from workloads.mpi import NODE_ENTRIES_ENV

    engine = TorchDDPEngine() if ops == "torch" else HorovodEngine()
    cell = validate(CellConfig(engine=engine.name, model="lenet-mlp", layers=None,
                               devices=nodes, batch=32,
                               engine_params=(("horovod_ops", ops),) if ops == "mpi" else ()))
    cluster.prepare(cell, nodes)
    run_dir = work / f"{ops}-{nodes}-{int(time.time() * 1000)}"
    out = run_dir / "result.json"
    rank_argv = [sys.executable, str(Path(__file__).resolve()), "--rank", str(out),
                 "--ops", ops, "--sizes", ",".join(map(str, sizes)),
                 "--repeats", str(repeats)]
    if program:
        rank_argv = [*program, "--out", str(out)]
    specs = engine.plan(cell, cluster.nodes()[:nodes], run_dir, TrainOptions())
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


def fail(message: str) -> None:
    """Bad input: one line, exit status 2."""
    print(f"bench_allreduce: {message}", file=sys.stderr)
    sys.exit(2)


def parse_list(text: str, what: str, parse=str, allowed=None, hint: str = "") -> list:
    """A comma-separated option's items, each in ``allowed``; else one line, exit 2."""
    try:
        items = [parse(item.strip()) for item in text.split(",") if item.strip()]
    except (ValueError, KeyError, IndexError):
        fail(f"--{what} {text!r}: not a comma-separated list of {what}")
    bad = [item for item in items if allowed is not None and item not in allowed]
    if not items or bad:
        fail(f"--{what} {text!r}: "
             + (hint or f"choose from {', '.join(map(str, allowed or ()))}"))
    return items


def print_markdown(rows: list[dict], ops: list[str]) -> None:
    """The docs' table: one line per link, N and size, the backends side by side."""
    by_key = {(r["profile"], r["nodes"], r["bytes"], r["ops"]): r for r in rows}
    keys = sorted({(r["link_mbit"], r["profile"], r["nodes"], r["bytes"]) for r in rows})
    labels = [OPS_LABEL[o] for o in ops]
    print("| link | N | size | floor ms | " + " | ".join(f"{label} ms" for label in labels)
          + " | " + " | ".join(f"{label} t/floor" for label in labels) + " |")
    print("|---" * (4 + 2 * len(ops)) + "|")
    for link_mbit, profile, nodes, nbytes in keys:
        cells = [by_key.get((profile, nodes, nbytes, o)) for o in ops]
        floor = ring_floor_s(nbytes, nodes, link_mbit)

        def ms(r):
            return "-" if r is None else f"{r['mean_s'] * 1e3:.3g} ± {r['ci95_s'] * 1e3:.2g}"

        def ratio(r):
            return "-" if r is None else f"{r['mean_s'] / floor:.2f}"
        print(f"| {link_mbit:g} Mbit ({profile}) | {nodes} | {size_text(nbytes)} | "
              f"{floor * 1e3:.3g} | " + " | ".join(map(ms, cells)) + " | "
              + " | ".join(map(ratio, cells)) + " |")


def model_args(model: str) -> list[str]:
    """``resnet-20`` is ``--model resnet --layers 20``; the others are their name."""
    if model.startswith("resnet-"):
        return ["--model", "resnet", "--layers", model.split("-", 1)[1]]
    return ["--model", model]


def end_to_end(profile: str, models: list[str], counts: list[int], repeats: int,
               max_samples: dict[str, int], epochs: int, work: Path) -> list[dict]:
    """``edgeprof sweep --horovod-ops gloo,mpi`` per model, ``repeats`` times; its rows."""
    rows = []
    for repeat in range(repeats):
        for model in models:
            out = work / f"e2e-{profile}-{model}-{repeat}"
            argv = [sys.executable, "-m", "profiler.cli", "sweep", "--cluster", "emulated",
                    "--profile", profile, "--engine", "horovod", "--horovod-ops", "gloo,mpi",
                    *model_args(model), "--devices", ",".join(map(str, counts)),
                    "--batch", "32", "--epochs", str(epochs),
                    "--max-samples", str(max_samples[model.split("-")[0]]),
                    "--no-agent", "--out", str(out)]
            print("$ edgeprof " + " ".join(argv[3:]), flush=True)
            log = work / f"{out.name}.log"  # the sweep's progress bar, off the table
            with log.open("w") as sink:
                done = subprocess.run(argv, cwd=Path(__file__).resolve().parents[1],
                                      stdout=sink, stderr=subprocess.STDOUT)
            results = out / "results.csv"
            if not results.exists():
                sys.exit(f"sweep for {model} wrote no results (exit {done.returncode}): "
                         + " ".join(log.read_text().strip().splitlines()[-1:]))
            with results.open() as handle:
                for row in csv.DictReader(handle):
                    ops = "mpi" if "mpi" in (row.get("horovod_ops") or "") else "gloo"
                    rows.append({"profile": profile, "model": model,
                                 "devices": int(row["devices"]), "ops": ops,
                                 "repeat": repeat, "status": row["status"],
                                 "samples_per_s": float(row["samples_per_s"] or "nan"),
                                 "reason": row.get("reason", "")})
    return rows


def print_end_to_end(rows: list[dict]) -> None:
    print("| link | model | N | hvd-gloo samples/s | hvd-mpi samples/s | MPI / Gloo |")
    print("|---|---|---|---|---|---|")
    keys = sorted({(r["profile"], r["model"], r["devices"]) for r in rows})
    for profile, model, devices in keys:
        rates = {}
        for ops in ("gloo", "mpi"):
            got = [r for r in rows if (r["profile"], r["model"], r["devices"], r["ops"])
                   == (profile, model, devices, ops)]
            bad = [r for r in got if r["status"] != "ok"]
            if bad:
                print(f"  ({ops} {model} N={devices}: {bad[0]['status']} {bad[0]['reason']})")
            rates[ops] = [r["samples_per_s"] for r in got if r["status"] == "ok"]

        def text(samples):
            if not samples:
                return "-"
            mean, half = interval(samples)
            return f"{mean:.0f}" if math.isnan(half) else f"{mean:.0f} ± {half:.0f}"
        ratio = (f"{statistics.fmean(rates['mpi']) / statistics.fmean(rates['gloo']):.2f}"
                 if rates["gloo"] and rates["mpi"] else "-")
        print(f"| {profile} | {model} | {devices} | {text(rates['gloo'])} | "
              f"{text(rates['mpi'])} | {ratio} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rank", help=argparse.SUPPRESS)
    parser.add_argument("--profiles", default="pi3b,pi4")
    parser.add_argument("--nodes", default="2,4,8")
    parser.add_argument("--ops", default="gloo,mpi,torch",
                        help="gloo (Horovod), mpi (Horovod), torch (torch.distributed Gloo)")
    parser.add_argument("--sizes", help="exact sizes, e.g. 4K,4M (default: 4K x4 ... "
                                        "--max-size)")
    parser.add_argument("--max-size", default="64M")
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--markdown", action="store_true", help="also print the docs' table")
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--end-to-end", action="store_true",
                        help="training cells over Horovod's Gloo and MPI instead")
    parser.add_argument("--models", default="lenet-mlp,resnet-20")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--max-samples", default="lenet=2560,resnet=512",
                        help="training set cap per model family")
    args = parser.parse_args()
    if args.rank:
        main_of = torch_rank_main if args.ops == "torch" else rank_main
        main_of(Path(args.rank), [int(s) for s in args.sizes.split(",")], args.repeats)
        return

    from profiler.cluster import emulated
    from profiler.cluster.profiles import load_catalog
    from profiler.errors import ClusterError

    catalog = load_catalog().profiles
    profiles = parse_list(args.profiles, "profiles", allowed=sorted(catalog))
    counts = parse_list(args.nodes, "nodes", int, allowed=range(2, 65),
                        hint="node counts from 2 to 64, e.g. 2,4,8")
    ops_list = parse_list(args.ops, "ops", allowed=OPS)
    if args.sizes:
        sizes = parse_list(args.sizes, "sizes", parse_size)
    else:
        try:
            sizes = [s for s in SIZES if s <= parse_size(args.max_size)]
        except (ValueError, KeyError, IndexError):
            fail(f"--max-size {args.max_size!r}: a size such as 16M or 256K")
    if args.repeats < 1:
        fail(f"--repeats {args.repeats}: at least 1")
    if os.geteuid() != 0:
        fail("the emulated cluster needs root: run it with sudo")
    models = parse_list(args.models, "models")
    try:
        caps = {k: int(v) for k, v in (item.split("=") for item in args.max_samples.split(","))}
    except ValueError:
        fail(f"--max-samples {args.max_samples!r}: FAMILY=N pairs, e.g. lenet=2560,resnet=512")
    if args.end_to_end and any(m.split("-")[0] not in caps for m in models):
        fail(f"--max-samples {args.max_samples!r}: give a cap for every --models family")
    brought_up = []

    def cluster_for(profile: str):
        """The emulated cluster of ``profile`` with enough nodes (rebuilt when idle)."""
        cluster, created = emulated.ensure_cluster(max(counts), profile)
        brought_up.append(created)
        return cluster

    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-allreduce-") as tmp:
        try:
            if args.end_to_end:
                for profile in profiles:
                    cluster_for(profile)
                    rows += end_to_end(profile, models, counts, args.repeats, caps,
                                       args.epochs, Path(tmp))
                print_end_to_end(rows)
            else:
                rows = run_allreduce(cluster_for, profiles, counts, ops_list, sizes,
                                     args.repeats, catalog, Path(tmp))
                if args.markdown:
                    print_markdown(rows, ops_list)
            if args.json:
                Path(args.json).write_text(json.dumps(rows, indent=1))
        except ClusterError as exc:
            fail(str(exc))
        finally:
            if any(brought_up):
                emulated.down()


def run_allreduce(cluster_for, profiles: list[str], counts: list[int], ops_list: list[str],
                  sizes: list[int], repeats: int, catalog: dict, work: Path) -> list[dict]:
    """Every (profile, N, backend): one run of all sizes; the rows, printed as they come."""
    rows = []
    print(f"load average {os.getloadavg()[0]:.1f} at the start", flush=True)
    print(f"{'link':>9} {'N':>2} {'ops':>10} {'size':>6} {'mean ms':>10} {'±95% ms':>9} "
          f"{'busbw MB/s':>10} {'floor ms':>9} {'t/floor':>7}")
    for profile in profiles:
        cluster = cluster_for(profile)
        link_mbit = catalog[profile].link_mbit
        for nodes in counts:
            for ops in ops_list:
                result = run_backend(cluster, ops, nodes, sizes, repeats, work)
                if (nodes, ops) == (counts[0], ops_list[0]):  # quotas are set by now
                    print(f"# {profile}: {link_mbit:g} Mbit, node quota "
                          f"{cluster.nodes()[0].cpu_cores:.3g} host cores", flush=True)
                for row in result["rows"]:
                    mean, half = interval(row["times_s"])
                    floor = ring_floor_s(row["bytes"], nodes, link_mbit)
                    busbw = row["bytes"] / mean * 2 * (nodes - 1) / nodes / 1e6
                    rows.append({"profile": profile, "link_mbit": link_mbit,
                                 "nodes": nodes, "ops": ops, **row,
                                 "mean_s": mean, "ci95_s": half,
                                 "busbw_mb_s": busbw, "floor_s": floor})
                    print(f"{link_mbit:>5g}Mbit {nodes:>2} {OPS_LABEL[ops]:>10} "
                          f"{size_text(row['bytes']):>6} {mean * 1e3:>10.2f} "
                          f"{half * 1e3:>9.2f} {busbw:>10.2f} {floor * 1e3:>9.2f} "
                          f"{mean / floor:>7.2f}", flush=True)
    print(f"load average {os.getloadavg()[0]:.1f} at the end", flush=True)
    return rows


if __name__ == "__main__":
    main()
