"""Every engine's sync training on one cluster: parameter servers (MXNet ``dist_sync``,
the torch engine) against ring allreduce (Horovod, torch DDP).

For each engine and worker count (default 2 and 4) on the emulated cluster: samples/s
and network bytes per training step, set against the model's parameter bytes
``P = 4 * parameter_count`` and the floor of each scheme per step:

- parameter server (``master`` placement: scheduler + server on node 0, workers on
  nodes 1..N): each worker sends its gradients (P) and receives the weights (P);
  the server node receives and sends ``N * P``;
- ring allreduce (Horovod over Gloo, torch DDP; one worker per node): each worker sends and
  receives ``2 (N-1)/N * P`` (reduce-scatter, then allgather).

Bytes per step are *marginal*: each configuration runs twice, with S1 and S2 steps per
worker, and ``(bytes(S2) - bytes(S1)) / (S2 - S1)`` cancels what a run costs once
(rendezvous, broadcast of the initial weights, KVStore init, shutdown). Bytes are the
nodes' own interface counters (``eth0`` inside each namespace, read with ``ip -s``),
so they include TCP/IP headers (about 3% at a 1500-byte MTU) and ps-lite's or Gloo's
framing: a ratio to the floor just above 1 means no waste.

    sudo python benchmarks/bench_engines.py                  # emulated, lenet-mlp, 2 and 4
    python benchmarks/bench_engines.py --cluster local       # loopback: see below

Also per engine: ``1st_step_s``, launch to the first completed step (every process
started, the framework imported, the group joined, one step), against two floors:
``/import``, the time one fresh process takes to import what the engine needs (the
framework; for DDP also ``torch._dynamo``, which its constructor imports; for Horovod its
MXNet binding), and ``/all_imp``, the time the cell's K processes take to do that all at
once on this host, what no launch of the cell can beat here: on the emulated cluster the
nodes share the host's cores while they start (their quotas apply after start-up), so
five processes importing torch on two cores take about 2.5 x one. The start-up table at
the end splits each worker's start into its phases (the ``start`` event's
``startup_s``). ``rss_MB`` is the peak resident memory of a worker process (with its
children) as the node's agent sampled it, ``budget`` what it may hold: a fresh
process's RSS after the same imports, plus the worker's uint8 data (shard and
validation set), plus the model's weights, gradients and momentum, plus 30 MB.

On ``--cluster local`` every node shares the host's ``lo``: only the total over the cell
can be counted (each byte once, as sent), not per node.
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

import psutil  # noqa: E402

from profiler.engines import get_engine  # noqa: E402
from profiler.engines.base import TrainOptions  # noqa: E402
from profiler.sweep.grid import CellConfig, validate  # noqa: E402
from profiler.sweep.runner import run_cell  # noqa: E402
from workloads.models import parameter_count  # noqa: E402

BYTES_PER_PARAM = 4  # float32
IDLE_WAIT_S = 600.0  # how long to wait for someone else's run on the emulated cluster


def ps_floor_worker(param_bytes: int, workers: int) -> float:
    """Bytes one parameter-server worker sends (and receives) per step, at least."""
    return float(param_bytes)


def ring_floor_worker(param_bytes: int, workers: int) -> float:
    """Bytes one ring-allreduce worker sends (and receives) per step, at least."""
    return 2.0 * (workers - 1) / workers * param_bytes


def floor_worker(engine_name: str, cell, param_bytes: int, workers: int) -> float:
    """The floor of the engine's way of moving gradients (its ``comm``), not its name."""
    comm = get_engine(engine_name).comm(cell)
    floor = ring_floor_worker if comm == "allreduce" else ps_floor_worker
    return floor(param_bytes, workers)


class Counters:
    """Bytes sent/received per node: each namespace's eth0, or the host's lo for all."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.emulated = cluster.name == "emulated"

    def read(self, nodes) -> dict[str, tuple[int, int, int]]:
        """Per node: (bytes sent, bytes received, packets sent)."""
        if self.emulated:
            from profiler.cluster import netns

            out = {}
            for node in nodes:
                c = netns.interface_counters(node.scope.netns)
                out[node.name] = (c["tx_bytes"], c["rx_bytes"], c["tx_packets"])
            return out
        lo = psutil.net_io_counters(pernic=True)["lo"]
        return {"lo": (lo.bytes_sent, lo.bytes_recv, lo.packets_sent)}


def open_cluster(name: str, nodes: int):
    if name == "local":
        from profiler.cluster.local import LocalCluster

        return LocalCluster(nodes)
    from profiler.cluster import emulated

    cluster, _ = emulated.ensure_cluster(nodes)
    # A sweep of someone else on the same nodes would be counted as ours: wait it out.
    deadline = time.monotonic() + IDLE_WAIT_S
    while cluster.busy():
        if time.monotonic() > deadline:
            sys.exit(f"the emulated cluster stayed busy for {IDLE_WAIT_S:.0f} s")
        time.sleep(2)
    return cluster


def run_once(cluster, engine_name: str, model: str, layers, workers: int, batch: int,
             steps: int, out: Path) -> tuple[dict, dict[str, tuple[int, ...]], list[str]]:
    """One cell with ``steps`` steps per worker; its record, bytes per node, worker nodes."""
    engine = get_engine(engine_name)
    cell = validate(CellConfig(engine=engine_name, model=model, layers=layers, batch=batch,
                               devices=workers, sync="sync", max_samples=batch * workers * steps))
    nodes = cluster.nodes()[: engine.nodes_needed(cell)]
    plan = engine.plan(cell, nodes, out, TrainOptions())
    worker_nodes = [s.node.name for s in plan if s.role == "worker"]
    counters = Counters(cluster)
    before = counters.read(nodes)
    # The agents sample each node (0.5 s) for the workers' memory; they send nothing on
    # the nodes' links (nothing is shipped), so the byte counts stay the engine's.
    rec = run_cell(cell, cluster, engine, out / f"{cell.cell_id}", TrainOptions(val_samples=64),
                   sweep_id="bench", timeout_s=900, monitor_interval_s=0.5)
    after = counters.read(nodes)
    if rec["status"] != "ok":
        sys.exit(f"{cell.label}: {rec['status']}: {rec['reason']}")
    moved = {name: tuple(a - b for a, b in zip(after[name], before[name])) for name in before}
    return rec, moved, worker_nodes


# What each engine's processes must import before their first step: the framework, and
# what the engine's own library pulls in (DDP's constructor imports torch._dynamo:
# 68 MB and 0.8 CPU-s here; Horovod's MXNet binding its extension).
ENGINE_IMPORTS = {"mxnet": "mxnet", "horovod": "mxnet, horovod.mxnet", "torch": "torch",
                  "torch-ddp": "torch, torch._dynamo"}


def import_floor_s(modules: str, processes: int = 1, repeats: int = 3) -> float:
    """The fastest of ``repeats`` launches of ``processes`` fresh ``python -c "import
    <modules>"`` at once, until the last has exited: what no launch of a cell with that
    many processes can beat on this host (its processes share the host's cores while
    they start; the emulated nodes' quotas apply after start-up)."""
    import subprocess

    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        children = [subprocess.Popen([sys.executable, "-c", f"import {modules}"])
                    for _ in range(processes)]
        if any(child.wait() for child in children):
            sys.exit(f"python -c 'import {modules}' failed")
        times.append(time.perf_counter() - t0)
    return min(times)


RSS_MARGIN_MB = 30  # issue 28's budget over import + data + model


def import_rss_mb(modules: str) -> float:
    """Peak resident memory of a fresh process that imports ``modules`` and stops."""
    import subprocess

    probe = (f"import {modules}\n"
             "print([l for l in open('/proc/self/status') if l.startswith('VmHWM')][0]"
             ".split()[1])")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True)
    return int(done.stdout.split()[-1]) / 1024


def rss_budget_mb(import_mb: float, cell_dir: Path) -> float:
    """Import + data + model + RSS_MARGIN_MB for the worker of rank 0: its uint8 shard
    and validation set, and the model's float32 weights, gradients and momentum."""
    from math import prod

    from workloads.events import read_events
    from workloads.models import input_shape

    start = next(e for e in read_events(cell_dir / "events" / "worker-0.jsonl")
                 if e["event"] == "start")
    data_mb = (start["worker_samples"] + start["val_samples"]) * prod(
        input_shape(start["model"])) / 1e6
    model_mb = 3 * BYTES_PER_PARAM * start["param_count"] / 1e6
    return import_mb + data_mb + model_mb + RSS_MARGIN_MB


def startup_phases(rec: dict, cell_dir: Path) -> dict[str, float]:
    """Median over the cell's workers of each start-up phase (the ``start`` event's
    ``startup_s``), and ``to_start``: the launch to the ``start`` event."""
    from statistics import median

    from workloads.events import read_events

    starts = [e for path in sorted((cell_dir / "events").glob("worker-*.jsonl"))
              for e in read_events(path) if e["event"] == "start"]
    phases: dict[str, list[float]] = {}
    for start in starts:
        for name, seconds in {**start.get("startup_s", {}),
                              "to_start": start["t"] - rec["launched_at"]}.items():
            phases.setdefault(name, []).append(seconds)
    return {name: median(values) for name, values in phases.items()}


def rec_cell(rec: dict) -> CellConfig:
    """The cell of a result record."""
    return CellConfig(**{k: rec[k] for k in CellConfig.__dataclass_fields__})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cluster", default="emulated", choices=("emulated", "local"))
    parser.add_argument("--model", default="lenet-mlp")
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--workers", default="2,4")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", default="10,40", help="S1,S2 steps per worker")
    parser.add_argument("--engines", default="mxnet,horovod,torch,torch-ddp")
    args = parser.parse_args()
    workers_list = [int(w) for w in args.workers.split(",")]
    s1, s2 = (int(s) for s in args.steps.split(","))
    layers = args.layers if args.model == "resnet" else None
    param_bytes = BYTES_PER_PARAM * parameter_count(args.model, layers)
    cluster = open_cluster(args.cluster, max(workers_list) + 1)
    out = Path(tempfile.mkdtemp(prefix="edgeprof-bench-engines-"))
    print(f"{args.model}{layers or ''} batch {args.batch} on the {args.cluster} cluster "
          f"({cluster.nodes()[0].profile}); P = 4 x {parameter_count(args.model, layers)} "
          f"params = {param_bytes / 1e3:.1f} KB; marginal over {s1} -> {s2} steps")
    engines = args.engines.split(",")
    floors_s = {name: import_floor_s(ENGINE_IMPORTS[name]) for name in engines}
    print("import floor (one fresh process, host): " + ", ".join(
        f"{name} {s:.2f} s" for name, s in floors_s.items()))
    imports_mb = {name: import_rss_mb(ENGINE_IMPORTS[name]) for name in engines}
    print("import RSS (one fresh process): " + ", ".join(
        f"{name} {mb:.0f} MB" for name, mb in imports_mb.items()))
    later = (f" {'1st_step_s':>10} {'/import':>7} {'/all_imp':>8} {'rss_MB':>7} "
             f"{'budget':>7}")
    if args.cluster == "emulated":
        print(f"{'engine':>9} {'N':>2} {'samples/s':>10} {'wkr_tx/P':>9} {'wkr_rx/P':>9} "
              f"{'floor/P':>8} {'tx/floor':>9} {'busiest/P':>10} {'total/P':>8} "
              f"{'pkts/step':>9}" + later)
    else:
        print(f"{'engine':>9} {'N':>2} {'samples/s':>10} {'total/P':>8} {'floor/P':>8} "
              f"{'ratio':>6} {'pkts/step':>9}" + later)
    startups = []
    for workers in workers_list:
        for engine_name in args.engines.split(","):
            _, short, _ = run_once(cluster, engine_name, args.model, layers, workers,
                                   args.batch, s1, out)
            rec, long, worker_nodes = run_once(cluster, engine_name, args.model, layers,
                                               workers, args.batch, s2, out)
            startups.append((engine_name, workers, startup_phases(rec, out / rec["cell_id"])))
            per_step = {n: tuple((a - b) / (s2 - s1) for a, b in zip(long[n], short[n]))
                        for n in long}
            floor = floor_worker(engine_name, rec_cell(rec), param_bytes, workers)
            total_tx = sum(c[0] for c in per_step.values())
            first = rec.get("first_step_s")
            floor_s = floors_s[engine_name]
            processes = len(get_engine(engine_name).plan(rec_cell(rec), cluster.nodes(),
                                                         out, TrainOptions()))
            all_s = import_floor_s(ENGINE_IMPORTS[engine_name], processes)
            budget_mb = rss_budget_mb(imports_mb[engine_name], out / rec["cell_id"])
            tail = (f" {first:>10.2f} {first / floor_s:>7.2f} {first / all_s:>8.2f} "
                    f"{rec.get('rss_mb_peak') or float('nan'):>7.0f} {budget_mb:>7.0f}"
                    ) if first else ""
            packets = sum(c[2] for c in per_step.values())
            if args.cluster == "emulated":
                wtx = sum(per_step[n][0] for n in worker_nodes) / workers
                wrx = sum(per_step[n][1] for n in worker_nodes) / workers
                busiest = max(c[0] + c[1] for c in per_step.values())
                print(f"{engine_name:>9} {workers:>2} {rec['samples_per_s']:>10.1f} "
                      f"{wtx / param_bytes:>9.3f} {wrx / param_bytes:>9.3f} "
                      f"{floor / param_bytes:>8.3f} {wtx / floor:>9.3f} "
                      f"{busiest / param_bytes:>10.3f} {total_tx / param_bytes:>8.3f} "
                      f"{packets:>9.0f}" + tail)
            else:
                # Each byte crosses lo once: the cell's total sent, against N x floor.
                ps = get_engine(engine_name).comm(rec_cell(rec)) != "allreduce"
                total_floor = workers * floor * (2 if ps else 1)
                print(f"{engine_name:>9} {workers:>2} {rec['samples_per_s']:>10.1f} "
                      f"{total_tx / param_bytes:>8.3f} {total_floor / param_bytes:>8.3f} "
                      f"{total_tx / total_floor:>6.3f} {packets:>9.0f}" + tail)
    print("start-up, s (median over workers; launch -> start event, and its phases in the "
          "worker: python, framework import, join, data, build):")
    for engine_name, workers, phases in startups:
        print(f"{engine_name:>9} {workers:>2} " + " ".join(
            f"{name} {seconds:.2f}" for name, seconds in phases.items()))
    print(f"cells kept in {out}")


if __name__ == "__main__":
    main()
