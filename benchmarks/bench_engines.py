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
started, the framework imported, the group joined, one step), against the time a fresh
process takes to ``import torch`` or ``import mxnet`` on the host (``/import``: what no
launch can beat), and ``rss_MB``, the peak resident memory of a worker process (with its
children) as the node's agent sampled it. Busiest/P on a parameter server is its server
node's bytes sent + received per step, against 2N (N pushes in, N pulls out).

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


def import_floor_s(framework: str, repeats: int = 3) -> float:
    """The fastest of ``repeats`` fresh ``python -c "import <framework>"`` on this host:
    what no launch can beat (a worker imports its framework before anything else)."""
    import subprocess

    module = "torch" if framework == "torch" else "mxnet"
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", f"import {module}"], check=True)
        times.append(time.perf_counter() - t0)
    return min(times)


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
    floors_s = {fw: import_floor_s(fw) for fw in
                {get_engine(name).framework for name in args.engines.split(",")}}
    print("import floor (fresh process, host): " + ", ".join(
        f"{fw} {s:.2f} s" for fw, s in sorted(floors_s.items())))
    later = (f" {'1st_step_s':>10} {'/import':>7} {'rss_MB':>7}")
    if args.cluster == "emulated":
        print(f"{'engine':>9} {'N':>2} {'samples/s':>10} {'wkr_tx/P':>9} {'wkr_rx/P':>9} "
              f"{'floor/P':>8} {'tx/floor':>9} {'busiest/P':>10} {'total/P':>8} "
              f"{'pkts/step':>9}" + later)
    else:
        print(f"{'engine':>9} {'N':>2} {'samples/s':>10} {'total/P':>8} {'floor/P':>8} "
              f"{'ratio':>6} {'pkts/step':>9}" + later)
    for workers in workers_list:
        for engine_name in args.engines.split(","):
            _, short, _ = run_once(cluster, engine_name, args.model, layers, workers,
                                   args.batch, s1, out)
            rec, long, worker_nodes = run_once(cluster, engine_name, args.model, layers,
                                               workers, args.batch, s2, out)
            per_step = {n: tuple((a - b) / (s2 - s1) for a, b in zip(long[n], short[n]))
                        for n in long}
            floor = floor_worker(engine_name, rec_cell(rec), param_bytes, workers)
            total_tx = sum(c[0] for c in per_step.values())
            first = rec.get("first_step_s")
            floor_s = floors_s[get_engine(engine_name).framework]
            tail = (f" {first:>10.2f} {first / floor_s:>7.2f} "
                    f"{rec.get('rss_mb_peak') or float('nan'):>7.0f}") if first else ""
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
    print(f"cells kept in {out}")


if __name__ == "__main__":
    main()
