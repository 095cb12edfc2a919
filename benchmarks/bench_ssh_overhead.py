"""Per-cell overhead of the SSH (inventory) cluster against the emulated cluster, one run.

The same nodes serve both: three emulated Pi-class nodes (network namespaces, shaped
100 Mbit links), reached directly (``--cluster emulated``: nsenter) and over SSH
(``--cluster inventory``: sshd in each namespace and in the node's cgroups, so that
what it starts runs under the same CPU quota, ``profiler.testing.sshd``). The same
tiny cells run on each, alternating, so that a noisy machine hits both alike. For each
cell: wall time from launch to the last process reaped, training time (the workers'
own ``train_s``), and the overhead = wall - training (process start, MXNet import,
KVStore setup, evaluation, reaping; and for SSH: the connections, remote_exec, and
bringing the cell folder back with tar). Prints the medians and the ratio SSH/emulated.

    sudo .venv/bin/python benchmarks/bench_ssh_overhead.py [--cells 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("OMP_NUM_THREADS", "1")

from profiler.cell import CellConfig  # noqa: E402
from profiler.cluster import cluster_settings, emulated  # noqa: E402
from profiler.sweep.grid import validate  # noqa: E402
from profiler.sweep.sweep import SweepSettings, run_sweep  # noqa: E402
from profiler.testing.sshd import SshdNodes  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=3, help="cells per cluster")
    args = parser.parse_args()
    cluster, brought_up = emulated.ensure_cluster(3)
    work = Path(tempfile.mkdtemp(prefix="bench-ssh-"))
    try:
        # sshd inside the nodes' cgroups: processes it starts get the same CPU and memory
        # limits as the emulated cluster's own.
        with SshdNodes(cluster.nodes()[:3], work, cluster=cluster) as sshd:
            inventory = sshd.write_inventory(
                work / "inventory.ini", {"master": ["n0"], "workers": ["n1", "n2"]},
                host_vars={n: {"edgeprof_workdir": str(work / f"remote-{n}"),
                               "edgeprof_python": sys.executable} for n in ("n0", "n1", "n2")})
            results: dict[str, list[dict]] = {"emulated": [], "inventory": []}
            for index in range(args.cells):
                cell = validate(CellConfig(model="lenet-mlp", layers=None, devices=2,
                                           batch=32, max_samples=2048, dataset="synthetic",
                                           epochs=1, lr=0.02 + index * 1e-4))
                for name in ("emulated", "inventory"):
                    out = work / f"{name}-{index}"
                    provider = cluster_settings(
                        name, inventory=inventory if name == "inventory" else None)
                    settings = SweepSettings(cells=[cell], out_dir=out, cluster=provider,
                                             val_samples=256, interval_s=1.0)
                    record = run_sweep(settings, progress=False).records[0]
                    assert record["status"] == "ok", record["reason"]
                    results[name].append(record)
    finally:
        if brought_up:
            emulated.down()

    def medians(records: list[dict]) -> tuple[float, float, float]:
        wall = [r["reaped_at"] - r["launched_at"] for r in records]
        train = [r["train_s"] for r in records]
        over = [w - t for w, t in zip(wall, train)]
        return statistics.median(wall), statistics.median(train), statistics.median(over)

    print(f"{args.cells} cells each: LeNet-MLP, 2 workers + master, dist_sync, 2,048 samples")
    print(f"{'cluster':<10} {'wall s':>8} {'train s':>8} {'overhead s':>11}")
    rows = {name: medians(records) for name, records in results.items()}
    for name, (wall, train, over) in rows.items():
        print(f"{name:<10} {wall:>8.2f} {train:>8.2f} {over:>11.2f}")
    print(f"ratio SSH/emulated: overhead {rows['inventory'][2] / rows['emulated'][2]:.2f}, "
          f"wall {rows['inventory'][0] / rows['emulated'][0]:.2f}")


if __name__ == "__main__":
    main()
